//! Whether a backing file's path may lead elsewhere since it was last seen to
//! lead to the file, without a path lookup at every `sync`.
//!
//! `sync` ends by checking that each backing file is still the one at its path
//! (a `stat` per backing file, a walk of every component of the path). A
//! database syncs several times per commit, and on a virtual machine that walk
//! costs microseconds. Instead, one inotify instance per store watches:
//!
//! - each device directory, for any entry created, removed or renamed in it
//!   (such an event names the entry: only a backing file of that name is
//!   looked up again), and for the directory itself being moved or removed;
//! - each directory above a device directory, up to `/`, for the entry that
//!   leads down to the device directory being created, removed or renamed,
//!   and for the directory itself being moved or removed;
//! - the mount table (`/proc/self/mountinfo`, which polls with a priority
//!   event when something is mounted or unmounted).
//!
//! The kernel queues an inotify event inside the system call that makes the
//! change, so a drain of the queue after that call returns sees it. Every
//! check drains the queue (one `poll`, and a `read` when something is queued)
//! and looks a backing file up only if an event since its last good lookup
//! may concern it. Any event other than an entry of a device directory (an
//! ancestor or device directory moved or removed, a lost event, a mount
//! change) makes every backing file suspect and the watch is set up again
//! from the paths as they are now, before the lookups it forces.
//!
//! Not watched, so looked up at every check as before: roots given as
//! relative paths or through symbolic links, and directories on file systems
//! where another machine could change them unseen (NFS and the like): only
//! local file systems are watched.

use std::collections::HashMap;
use std::ffi::{CString, OsStr, OsString};
use std::os::fd::AsRawFd;

use crate::util::fds::Fd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// File systems whose changes all pass through this kernel.
const LOCAL_FS: [i64; 8] = [
    0xEF53,      // ext2, ext3, ext4
    0x1373,      // devtmpfs
    0x5846_5342, // xfs
    0x9123_683E, // btrfs
    0x0102_1994, // tmpfs
    0xF2F5_2010, // f2fs
    0x794C_7630, // overlayfs
    0x2FC1_2FC1, // zfs
];

/// Most names remembered from entry events before they are forgotten (and
/// every backing file made suspect instead).
const MAX_NAMES: usize = 4096;

/// What a watched directory is to the store.
enum Role {
    /// Device directory `i`: entry events name backing files.
    Device(usize),
    /// A directory above a device directory: only `next`, its entry on the way
    /// down, matters.
    Above { next: OsString },
}

struct Armed {
    inotify: Fd,
    /// Watch descriptor to what the directory is (one directory may be above
    /// several device directories, or be one and above another).
    roles: HashMap<i32, Vec<Role>>,
}

struct State {
    armed: Option<Armed>,
    /// `/proc/self/mountinfo`, polled for mount changes.
    mounts: Fd,
    /// Events seen so far (a sequence number).
    seq: u64,
    /// The sequence number of the last event that concerns every backing file.
    all_since: u64,
    /// Per (device, entry name): the sequence number of the last event naming it.
    names: HashMap<(usize, OsString), u64>,
    /// After a failed attempt to watch: checks until the next attempt.
    retry_in: u32,
}

/// Checks between attempts to set a failed watch up again.
const RETRY_EVERY: u32 = 256;

/// The watch of one store's device directories. See the module's comment.
pub(crate) struct PathWatch {
    roots: Vec<PathBuf>,
    /// None: the roots cannot be watched; every check looks every file up.
    state: Option<Mutex<State>>,
}

impl PathWatch {
    /// Watch `roots` if they can be watched (absolute paths without symbolic
    /// links, on local file systems, with inotify available).
    pub(crate) fn new(roots: &[PathBuf]) -> PathWatch {
        let watchable = roots.iter().all(|r| {
            r.is_absolute() && std::fs::canonicalize(r).is_ok_and(|c| &c == r) && local(r)
        });
        let state = watchable
            .then(|| {
                // SAFETY: a valid C string.
                Fd::make(&mut || unsafe {
                    libc::open(
                        c"/proc/self/mountinfo".as_ptr(),
                        libc::O_RDONLY | libc::O_CLOEXEC,
                    )
                })
                .ok()
            })
            .flatten()
            .map(|mounts| {
                Mutex::new(State {
                    armed: None,
                    mounts,
                    seq: 0,
                    all_since: 0,
                    names: HashMap::new(),
                    retry_in: 0,
                })
            });
        let w = PathWatch {
            roots: roots.to_vec(),
            state,
        };
        if let Some(s) = &w.state {
            let mut s = s.lock().unwrap_or_else(|p| p.into_inner());
            s.armed = w.arm();
        }
        w
    }

    /// For each `(device, entry name, since)` in `items`, whether no event
    /// since sequence number `since` can have changed where that device's
    /// entry leads, written to `out`; returns the sequence number now, to be
    /// given as `since` after a lookup that follows this call found the file
    /// in place. `None` (and `out` left empty) when nothing is watched.
    pub(crate) fn unchanged<'a>(
        &self,
        items: impl Iterator<Item = (usize, &'a OsStr, u64)>,
        out: &mut Vec<bool>,
    ) -> Option<u64> {
        out.clear();
        let mut s = self
            .state
            .as_ref()?
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.drain(&mut s);
        s.armed.as_ref()?;
        for (device, name, since) in items {
            let named = s
                .names
                .get(&(device, name.to_os_string()))
                .is_some_and(|&at| at > since);
            out.push(since != 0 && s.all_since <= since && !named);
        }
        Some(s.seq)
    }

    /// Read what is queued; when something concerns every file, set the watch
    /// up again from the paths as they are now.
    fn drain(&self, s: &mut State) {
        let mut rearm = false;
        if s.armed.is_none() {
            if s.retry_in > 0 {
                s.retry_in -= 1;
                return;
            }
            rearm = true;
        } else {
            let mut fds = [
                libc::pollfd {
                    fd: s.mounts.as_raw_fd(),
                    events: libc::POLLPRI,
                    revents: 0,
                },
                libc::pollfd {
                    fd: s.armed.as_ref().map_or(-1, |a| a.inotify.as_raw_fd()),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfd records; a negative fd is ignored.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, 0) };
            if n < 0 {
                rearm = true;
            } else if n > 0 {
                if fds[0].revents & (libc::POLLPRI | libc::POLLERR) != 0 {
                    rearm = true;
                }
                if fds[1].revents != 0 && !self.read_events(s) {
                    rearm = true;
                }
            }
        }
        if rearm {
            s.armed = self.arm();
            if s.armed.is_none() {
                s.retry_in = RETRY_EVERY;
            }
            // After the new watch is in place: every file is looked up once.
            s.seq += 1;
            s.all_since = s.seq;
            s.names.clear();
        }
    }

    /// Read every queued event. False if one concerns every file (or reading
    /// failed).
    fn read_events(&self, s: &mut State) -> bool {
        let Some(a) = &s.armed else { return false };
        let fd = a.inotify.as_raw_fd();
        let mut buf = [0u64; 512];
        let mut fine = true;
        loop {
            // SAFETY: reads into a buffer of its stated size.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), std::mem::size_of_val(&buf)) };
            if n <= 0 {
                // EAGAIN: drained. Another error: trust nothing.
                if n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EAGAIN) {
                    fine = false;
                }
                break;
            }
            // SAFETY: the kernel wrote `n` bytes of whole records into `buf`.
            let bytes =
                unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n as usize) };
            let head = std::mem::size_of::<libc::inotify_event>();
            let mut at = 0;
            while at + head <= bytes.len() {
                // SAFETY: a whole record starts at `at`; read unaligned.
                let ev: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(bytes[at..].as_ptr().cast()) };
                let name_bytes = &bytes[at + head..(at + head + ev.len as usize).min(bytes.len())];
                let name = OsStr::from_bytes(name_bytes.split(|&b| b == 0).next().unwrap_or(&[]));
                at += head + ev.len as usize;
                let entry =
                    libc::IN_CREATE | libc::IN_DELETE | libc::IN_MOVED_FROM | libc::IN_MOVED_TO;
                if ev.mask & entry == 0 || name.is_empty() {
                    // Moved, removed or unmounted itself, an overflow, or a
                    // watch dropped.
                    fine = false;
                    continue;
                }
                for role in a.roles.get(&ev.wd).map_or(&[][..], |v| v) {
                    match role {
                        Role::Device(d) => {
                            s.seq += 1;
                            s.names.insert((*d, name.to_os_string()), s.seq);
                        }
                        Role::Above { next } if next == name => fine = false,
                        Role::Above { .. } => {}
                    }
                }
            }
            if s.names.len() > MAX_NAMES {
                fine = false;
            }
        }
        fine
    }

    /// Watch every root and every directory above it; None if any watch fails.
    fn arm(&self) -> Option<Armed> {
        // SAFETY: plain system call.
        let inotify =
            Fd::make(&mut || unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) })
                .ok()?;
        let mut roles: HashMap<i32, Vec<Role>> = HashMap::new();
        let add = |dir: &Path, roles: &mut HashMap<i32, Vec<Role>>, role: Role| -> Option<()> {
            let c = CString::new(dir.as_os_str().as_bytes()).ok()?;
            let mask = libc::IN_CREATE
                | libc::IN_DELETE
                | libc::IN_MOVED_FROM
                | libc::IN_MOVED_TO
                | libc::IN_MOVE_SELF
                | libc::IN_DELETE_SELF
                | libc::IN_ONLYDIR
                | libc::IN_DONT_FOLLOW;
            // SAFETY: a valid descriptor and C string.
            let wd = unsafe { libc::inotify_add_watch(inotify.as_raw_fd(), c.as_ptr(), mask) };
            (wd >= 0).then(|| roles.entry(wd).or_default().push(role))
        };
        for (i, root) in self.roots.iter().enumerate() {
            add(root, &mut roles, Role::Device(i))?;
            let mut below = root.as_path();
            while let Some(up) = below.parent() {
                let next = below.file_name()?.to_os_string();
                add(up, &mut roles, Role::Above { next })?;
                below = up;
            }
        }
        // Watched now: the paths must still be what was watched (a change
        // between the check at open and the watches is seen here).
        let same = self
            .roots
            .iter()
            .all(|r| std::fs::canonicalize(r).is_ok_and(|c| &c == r));
        same.then_some(Armed { inotify, roles })
    }
}

/// Whether `dir` and every directory above it are on local file systems.
fn local(dir: &Path) -> bool {
    dir.ancestors().all(|d| {
        let Ok(c) = CString::new(d.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: `statfs` is plain data; zeroed is a valid value to overwrite.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid C string and out pointer.
        let r = unsafe { libc::statfs(c.as_ptr(), &mut st) };
        r == 0 && LOCAL_FS.contains(&(st.f_type as i64))
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::Ordering;

    use crate::error::Error;
    use crate::storage::buf::AlignedBuf;
    use crate::storage::io::EngineKind;
    use crate::storage::layout::LayoutKind;
    use crate::storage::store::{Store, StoreOptions};

    struct Dir(PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn lookups(s: &Store) -> u64 {
        s.inner().lookups.load(Ordering::Relaxed)
    }

    /// `sync` looks up only the backing files that an event since their last
    /// lookup may concern, and still reports one that left its path, by its own
    /// rename or by a directory above it moving.
    #[test]
    fn a_sync_looks_up_only_the_backing_files_an_event_may_concern() {
        let base = std::fs::canonicalize(std::env::temp_dir())
            .unwrap()
            .join(format!("setcache-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = Dir(base.clone());
        let top = dir.0.join("top");
        let roots: Vec<PathBuf> = (0..2).map(|i| top.join(format!("dev{i}"))).collect();
        for r in &roots {
            std::fs::create_dir_all(r).unwrap();
        }
        let opts = StoreOptions {
            engine: EngineKind::Psync,
            direct_io: false,
            ..StoreOptions::default()
        };
        let store = Store::open(&roots, opts).unwrap();
        assert!(
            store.inner().watch.state.is_some(),
            "{base:?} is not watched"
        );
        let f = store.create("f", 1 << 20, LayoutKind::Stripe).unwrap();
        let mut b = AlignedBuf::new(4096);
        b.fill(1);
        f.write_at(0, &b).unwrap();
        f.sync().unwrap();
        let n = lookups(&store);
        // Nothing changed: no lookup.
        f.write_at(0, &b).unwrap();
        f.sync().unwrap();
        assert_eq!(
            lookups(&store),
            n,
            "a sync with nothing changed looked a file up"
        );
        // Other entries come and go in a device directory and above it: no lookup.
        std::fs::write(roots[0].join("other"), b"x").unwrap();
        std::fs::remove_file(roots[0].join("other")).unwrap();
        std::fs::create_dir(top.join("beside")).unwrap();
        f.sync().unwrap();
        assert_eq!(lookups(&store), n, "an unrelated entry made a lookup");
        // Device 1's backing file renamed away and back: that one file is looked up.
        let path1 = roots[1].join("f.scf");
        std::fs::rename(&path1, roots[1].join("away")).unwrap();
        std::fs::rename(roots[1].join("away"), &path1).unwrap();
        f.sync().unwrap();
        assert_eq!(lookups(&store), n + 1);
        // The directory above both devices moved away and back: both looked up.
        std::fs::rename(&top, base.join("moved")).unwrap();
        std::fs::rename(base.join("moved"), &top).unwrap();
        f.sync().unwrap();
        assert_eq!(lookups(&store), n + 3);
        f.sync().unwrap();
        assert_eq!(lookups(&store), n + 3, "the watch was not set up again");
        // Device 0's backing file renamed away: sync says so.
        std::fs::rename(roots[0].join("f.scf"), roots[0].join("away")).unwrap();
        let e = f.sync().unwrap_err();
        assert!(matches!(e, Error::BackingGone { device: 0, .. }), "{e:?}");
        std::fs::rename(roots[0].join("away"), roots[0].join("f.scf")).unwrap();
        f.sync().unwrap();
        // The directory above the devices moved away for good: sync says so.
        std::fs::rename(&top, base.join("moved")).unwrap();
        let e = f.sync().unwrap_err();
        assert!(matches!(e, Error::BackingGone { .. }), "{e:?}");
        assert!(e.to_string().contains("moved"), "{e}");
    }
}
