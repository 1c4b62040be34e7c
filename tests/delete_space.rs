//! A deleted (or replaced) file's space, back when the delete returns.

mod common;

use common::{TempDir, small_cache as cache};
use setcache::{CachedStore, LayoutKind};

/// A deleted file's space is back when its delete (or, for a file still
/// open, its last handle's drop) returns, as a local file system's: the
/// ring's registration of its backing file, which may be the last reference,
/// is let go first (before, a write right after a delete on a full file
/// system failed `ENOSPC` about one time in three: the space came back a
/// moment later), and each piece no name leads to any more is cut to length
/// 0 (a reference the kernel lets go of on a thread of its own after the
/// delete returned held it in up to 14 rounds of 40).
#[test]
fn a_deleted_files_space_is_back_when_the_delete_returns() {
    use std::io::Write;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let tmp = TempDir::new("delete-space");
    let Some((fs, store)) = common::tmpfs_store(&tmp, 16) else {
        return;
    };
    let cs = CachedStore::new(store, cache(256)).unwrap();
    let chunk = vec![5u8; 64 << 10];
    let mut late = Vec::new();
    for round in 0..40 {
        let name = format!("f{round}");
        let cf = cs.create(&name, 0, LayoutKind::Stripe).unwrap();
        cf.write_extending(0, &vec![7u8; 2 << 20]).unwrap();
        cf.sync().unwrap();
        // Half the rounds delete a closed file, half drop an open one's last
        // handle after its delete.
        let mut cf = Some(cf);
        if round % 2 == 0 {
            drop(cf.take());
        }
        common::take_the_rest(&fs.0);
        let mut b = std::fs::OpenOptions::new()
            .append(true)
            .open(fs.0.join("ballast"))
            .unwrap();
        cs.delete(&name).unwrap();
        drop(cf);
        if b.write_all(&chunk).is_err() {
            late.push(round);
        }
        drop(b);
        std::fs::remove_file(fs.0.join("ballast")).unwrap();
    }
    assert!(
        late.is_empty(),
        "rounds whose space came back late: {late:?}"
    );
    cs.close().unwrap();
}

/// A child made by `fork` that has not exec'd holds a copy of every
/// descriptor, the store's backing files among them: a deleted or replaced
/// file's space is back when the delete (or the replace, or the last
/// handle's drop) returns all the same, since its pieces are cut once no
/// name leads to them; the child reads nothing through those copies (the
/// store is its parent's). Through the page cache, whose handles hold the
/// file until the delete, and through the store alone, whose delete finds
/// a closed file held by nothing of its own.
#[test]
fn a_forked_childs_copies_do_not_hold_a_deleted_files_space() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for cached in [true, false] {
        let tmp = TempDir::new("delete-space-fork");
        let Some((fs, store)) = common::tmpfs_store(&tmp, 16) else {
            return;
        };
        let data = vec![7u8; 2 << 20];
        let late = if cached {
            let cs = CachedStore::new(store, cache(256)).unwrap();
            let late = fork_rounds(
                &fs.0,
                |name| {
                    let cf = cs.create(name, 0, LayoutKind::Stripe).unwrap();
                    cf.write_extending(0, &data).unwrap();
                    cf.sync().unwrap();
                    Box::new(cf)
                },
                |name| cs.delete(name).unwrap(),
                |from, to| cs.replace(from, to).unwrap(),
            );
            cs.close().unwrap();
            late
        } else {
            fork_rounds(
                &fs.0,
                |name| {
                    let f = store.create(name, 2 << 20, LayoutKind::Stripe).unwrap();
                    let mut b = setcache::AlignedBuf::new(2 << 20);
                    b.copy_from_slice(&data);
                    f.write_at(0, &b).unwrap();
                    f.sync().unwrap();
                    Box::new(f)
                },
                |name| store.delete(name).unwrap(),
                |from, to| store.replace(from, to).unwrap(),
            )
        };
        let through = if cached {
            "the page cache"
        } else {
            "the store"
        };
        assert!(
            late.is_empty(),
            "through {through}, a forked child's copies held the space after: {late:?}"
        );
    }
}

/// Four rounds (a delete and a replace, each of a file closed before and of
/// one closed just after), each with a child forked while the file was
/// open; the rounds whose space was not back at once. `make` makes a file of
/// 2 MiB, synced, and gives its handle.
fn fork_rounds<'a>(
    mnt: &std::path::Path,
    make: impl Fn(&str) -> Box<dyn Handle + 'a>,
    delete: impl Fn(&str),
    replace: impl Fn(&str, &str),
) -> Vec<&'static str> {
    use std::io::Write;
    let chunk = vec![5u8; 1 << 20];
    let mut late = Vec::new();
    for how in [
        "delete closed",
        "delete open",
        "replace closed",
        "replace open",
    ] {
        let replacing = how.starts_with("replace");
        let mut open = Some(make("victim"));
        if replacing {
            drop(make("other"));
        }
        let child = Child::fork();
        if how.ends_with("closed") {
            drop(open.take());
        }
        common::take_the_rest(mnt);
        let mut b = std::fs::OpenOptions::new()
            .append(true)
            .open(mnt.join("ballast"))
            .unwrap();
        // Room for the replace's intent record, not for the chunk.
        b.set_len(b.metadata().unwrap().len() - (64 << 10)).unwrap();
        if replacing {
            replace("other", "victim");
        } else {
            delete("victim");
        }
        drop(open);
        if b.write_all(&chunk).is_err() {
            late.push(how);
        }
        drop(b);
        std::fs::remove_file(mnt.join("ballast")).unwrap();
        drop(child);
        if replacing {
            delete("victim");
        }
    }
    late
}

/// A file's handle, kept open or dropped.
trait Handle {}
impl<T> Handle for T {}

/// The tests here fill a file system: a child one of them forks would hold
/// the other's ballast.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A child made by `fork` that waits, holding its copies of the parent's
/// descriptors, until dropped (then it ends and is reaped).
struct Child {
    pid: libc::pid_t,
    go: Option<std::os::fd::OwnedFd>,
}

impl Child {
    fn fork() -> Child {
        use std::os::fd::FromRawFd;
        let mut p = [0i32; 2];
        // SAFETY: `pipe` fills `p` with two new descriptors.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        // SAFETY: the child only reads from a pipe and ends, without running
        // any of the parent's handlers or destructors.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let mut byte = 0u8;
            // SAFETY: the child's own copies of the pipe's ends.
            unsafe {
                libc::close(p[1]);
                libc::read(p[0], (&mut byte as *mut u8).cast(), 1);
                libc::_exit(0);
            }
        }
        // SAFETY: the read end is the parent's copy, closed once here.
        unsafe { libc::close(p[0]) };
        Child {
            pid,
            // SAFETY: the write end is owned by the value from here on.
            go: Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(p[1]) }),
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // Closing the write end ends the child's read.
        drop(self.go.take());
        let mut status = 0;
        // SAFETY: reaps this value's child.
        unsafe { libc::waitpid(self.pid, &mut status, 0) };
    }
}
