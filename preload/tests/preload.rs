//! The preload library under a real C program (`tests/probe.c`, compiled
//! here with the system's C compiler, with and without 64-bit file offsets):
//! files outside `SETCACHE_DIR` behave exactly as without the library, files
//! inside it give the same transcript as files of a local file system, calls
//! the store cannot support fail with a clear errno and a message, a second
//! process gets the store's lock error, and a child after `fork` gets errors
//! on its inherited descriptors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The library cargo built for this test, beside it in target/<profile>/deps
/// (`cargo test` builds it there, and copies it up only on `cargo build`).
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let lib = exe.with_file_name("libsetcache_preload.so");
    assert!(lib.exists(), "{} is missing", lib.display());
    lib
}

/// The probe compiled into `dir`, with `-D_FILE_OFFSET_BITS=64` when `wide`.
fn probe(dir: &Path, wide: bool) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/probe.c");
    let out = dir.join(if wide { "probe64" } else { "probe" });
    let mut cc = Command::new("cc");
    cc.args(["-O1", "-Wall", "-Werror"]);
    if wide {
        cc.arg("-D_FILE_OFFSET_BITS=64");
    }
    let st = cc.arg(&src).arg("-o").arg(&out).status().expect("run cc");
    assert!(st.success(), "cc failed on {}", src.display());
    out
}

struct Setup {
    root: PathBuf,
    lib: PathBuf,
}

impl Setup {
    fn new(tag: &str) -> Setup {
        let root =
            std::env::temp_dir().join(format!("setcache-preload-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["plain", "outside", "store", "dev0", "dev1", "bin"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        Setup {
            root,
            lib: library(),
        }
    }

    fn p(&self, d: &str) -> PathBuf {
        self.root.join(d)
    }

    /// `cmd` with the library preloaded on this setup's store.
    fn preloaded(&self, prog: &Path) -> Command {
        let mut c = Command::new(prog);
        c.env("LD_PRELOAD", &self.lib)
            .env("SETCACHE_DIR", self.p("store"))
            .env(
                "SETCACHE_DEVICES",
                format!("{},{}", self.p("dev0").display(), self.p("dev1").display()),
            )
            .env("SETCACHE_CACHE_SIZE", "4M")
            // CI runs the suite again over a cache divided in three.
            .env(
                "SETCACHE_PARTITIONS",
                std::env::var("SETCACHE_TEST_PARTITIONS").unwrap_or_else(|_| "1".into()),
            );
        c
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Runs `c` to its end, its output captured; fails when it fails, or when
/// it has not ended after two minutes (a probe stuck in a call, a lock
/// that never comes, would otherwise hang the suite).
fn run(mut c: Command) -> Output {
    use std::process::Stdio;
    let child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the probe");
    let pid = child.id() as libc::pid_t;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let Ok(out) = rx.recv_timeout(std::time::Duration::from_secs(120)) else {
        // SAFETY: signals the probe's own process, which nothing has reaped yet.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        panic!("the probe was still running after 120 s");
    };
    let out = out.expect("wait for the probe");
    assert!(
        out.status.success(),
        "probe failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn files_inside_and_outside_behave_as_on_a_local_file_system() {
    let s = Setup::new("same");
    for wide in [true, false] {
        let prog = probe(&s.p("bin"), wide);
        let mut plain = Command::new(&prog);
        plain.arg(s.p("plain"));
        let plain = text(&run(plain).stdout);
        assert!(
            plain.lines().count() > 80,
            "the probe printed too little:\n{plain}"
        );
        let mut outside = s.preloaded(&prog);
        outside.arg(s.p("outside"));
        let outside = run(outside);
        assert_eq!(
            text(&outside.stdout),
            plain,
            "outside SETCACHE_DIR, with the library"
        );
        assert!(outside.stderr.is_empty(), "{}", text(&outside.stderr));
        let mut inside = s.preloaded(&prog);
        inside.arg(s.p("store"));
        let inside = run(inside);
        assert_eq!(
            text(&inside.stdout),
            plain,
            "inside SETCACHE_DIR (64-bit offsets: {wide})"
        );
        // The store's directory stays empty: the files are in the store.
        assert_eq!(std::fs::read_dir(s.p("store")).unwrap().count(), 0);
        assert!(std::fs::read_dir(s.p("dev0")).unwrap().count() > 0);
    }
}

/// The C library's `remove` and `mkstemp` family reach the files they name
/// through calls inside the C library, past the library's `unlink` and
/// `open`: in the store's directory `remove` left the store's file in place
/// (failing `ENOENT` on the real directory) and `mkstemp` made a real file
/// there that no call of the store saw. A temporary file made, written,
/// synced, renamed into place and removed behaves as in a local directory.
#[test]
fn remove_and_mkstemp_reach_the_stores_files() {
    let s = Setup::new("temp");
    let prog = probe(&s.p("bin"), true);
    let mut plain = Command::new(&prog);
    plain.arg(s.p("plain")).arg("temp");
    let plain = text(&run(plain).stdout);
    for want in [
        "mkstemp 1 made 1\n",
        "final 4 temp\n",
        "mkostemps 1 made 1 cloexec 1\n",
        "remove made 0 Success access -1 No such file or directory\n",
        "remove final 0 Success open 0 No such file or directory\n",
        "remove never -1 No such file or directory\n",
        "mkstemp short -1 Invalid argument\n",
    ] {
        assert!(
            plain.contains(want),
            "a local directory: {want:?} in\n{plain}"
        );
    }
    let mut inside = s.preloaded(&prog);
    inside.arg(s.p("store")).arg("temp");
    let inside = run(inside);
    assert_eq!(text(&inside.stdout), plain, "inside SETCACHE_DIR");
    assert_eq!(
        std::fs::read_dir(s.p("store")).unwrap().count(),
        0,
        "a file made in the store's directory on disk"
    );
}

/// Walks through the store's directory left by `longjmp` keep their
/// slots; once a thread has none left, the next such walk fails plainly
/// (a local directory's walk goes on).
#[test]
fn walks_left_by_longjmp_use_up_their_threads_slots_and_then_fail_plainly() {
    let s = Setup::new("slots");
    let prog = probe(&s.p("bin"), true);
    let mut plain = Command::new(&prog);
    plain.arg(s.p("plain")).arg("walk-slots");
    let plain = text(&run(plain).stdout);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("walk-slots");
    let out = run(c);
    let t = text(&out.stdout);
    let line = |t: &str, what: &str| {
        t.lines()
            .find(|l| l.starts_with(what))
            .unwrap_or_else(|| panic!("no line {what:?} in\n{t}"))[what.len()..]
            .trim()
            .to_string()
    };
    for t in [&plain, &t] {
        assert_eq!(line(t, "walks left by longjmp"), "16", "{t}");
    }
    assert_eq!(line(&plain, "a walk after them"), "0");
    assert_eq!(line(&plain, "  entries under the directory"), "2");
    assert_eq!(line(&t, "a walk after them"), "-1 ENOMEM", "{t}");
    let err = text(&out.stderr);
    assert!(err.contains("16 such walks are already under way"), "{err}");
}

#[test]
fn unsupported_calls_fail_with_a_clear_errno_and_message() {
    let s = Setup::new("refused");
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("refused");
    let out = run(c);
    let t = text(&out.stdout);
    let line = |what: &str| {
        t.lines()
            .find(|l| l.starts_with(what))
            .unwrap_or_else(|| panic!("no line {what:?} in\n{t}"))
            .split_whitespace()
            .skip(what.split_whitespace().count())
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(line("mmap"), "-1 ENODEV");
    assert_eq!(line("mkdir inside"), "-1 EPERM");
    // Names the store's directory would otherwise get on disk, where no
    // call of the store sees them.
    for what in [
        "mkdirat inside",
        "mknod inside",
        "symlink inside",
        "link inside",
    ] {
        assert_eq!(line(what), "-1 EPERM", "{what}");
    }
    assert_eq!(line("link from outside"), "-1 EXDEV");
    // The C library's own calls to the kernel behind these are taken too.
    for what in ["mkfifo inside", "mkfifoat inside", "mkdtemp inside"] {
        assert_eq!(line(what), "-1 EPERM", "{what}");
    }
    // No extended attributes: the answer of a file system without them,
    // which the ACL library (`cp -p`, `install`) takes as "use fchmod".
    for what in ["setxattr", "fsetxattr", "removexattr", "fremovexattr"] {
        assert_eq!(line(what), "-1 EOPNOTSUPP", "{what}");
    }
    assert_eq!(line("setxattr of a missing file"), "-1 ENOENT");
    // It would be the kernel's file, outside the store, and could never be
    // linked into it.
    assert_eq!(line("O_TMPFILE in the store's directory"), "-1 EOPNOTSUPP");
    for name in ["sub2", "fifo", "sym", "m2", "ln", "fifo2", "fifo3"] {
        assert!(
            std::fs::symlink_metadata(s.p("store").join(name)).is_err(),
            "{name} made in the store's directory"
        );
    }
    assert_eq!(
        std::fs::read_dir(s.p("store")).unwrap().count(),
        0,
        "a name made in the store's directory"
    );
    // The refused mapping did not disturb the file.
    assert_eq!(line("read after refused mmap"), "1");
    let err = text(&out.stderr);
    assert!(err.contains("mmap of a file in SETCACHE_DIR"), "{err}");
    assert!(err.contains("mkdir in SETCACHE_DIR"), "{err}");
    // The same calls on a plain directory succeed (the probe is not wrong).
    let mut plain = Command::new(&prog);
    plain.arg(s.p("plain")).arg("refused");
    let t = text(&run(plain).stdout);
    assert!(
        t.contains("mmap                                     0"),
        "{t}"
    );
}

/// The library's messages never stop the program: with stderr a pipe nobody
/// reads and SIGPIPE ignored (each message's write fails with EPIPE), the
/// refused calls still fail only with their errno.
#[test]
fn a_message_that_cannot_be_written_does_not_stop_the_program() {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    let s = Setup::new("no-stderr");
    let prog = probe(&s.p("bin"), true);
    let mut fds = [0; 2];
    // SAFETY: makes a pipe into `fds`.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the read end was just made and is owned here alone.
    let read_end = unsafe { OwnedFd::from_raw_fd(fds[0]) };
    // SAFETY: the write end was just made and is owned here alone.
    let write_end = unsafe { OwnedFd::from_raw_fd(fds[1]) };
    drop(read_end);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("refused").stderr(write_end);
    // SAFETY: only an async-signal-safe call between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
            Ok(())
        });
    }
    let t = text(&run(c).stdout);
    assert!(
        t.contains("mmap                                     -1 ENODEV"),
        "{t}"
    );
    assert!(
        t.contains("mkdir inside                             -1 EPERM"),
        "{t}"
    );
}

/// A partition count the cache cannot take fails the first call into the
/// store, naming the variable's value, and leaves the store free to open.
#[test]
fn a_bad_partition_count_is_a_clear_error() {
    let s = Setup::new("parts");
    let prog = probe(&s.p("bin"), true);
    for (v, want) in [
        ("65", "65 partitions"),
        ("two", "SETCACHE_PARTITIONS=\"two\""),
    ] {
        let mut c = s.preloaded(&prog);
        c.env("SETCACHE_PARTITIONS", v).arg(s.p("store"));
        let out = c.output().expect("run the probe");
        let err = text(&out.stderr);
        assert!(err.contains(want), "{v}: {err}");
    }
    // The failed opens left no lock behind: a good count works.
    let mut c = s.preloaded(&prog);
    c.env("SETCACHE_PARTITIONS", "2").arg(s.p("store"));
    run(c);
}

#[test]
fn a_second_process_gets_the_lock_error_and_a_forked_child_gets_errors() {
    let s = Setup::new("lock");
    let prog = probe(&s.p("bin"), true);
    // A shell holding the store (a descriptor of one of its files) runs the
    // probe as its child: two processes, one store.
    let mut sh = s.preloaded(Path::new("/bin/sh"));
    sh.arg("-c").arg(format!(
        "exec 3>{}/held; {} {}",
        s.p("store").display(),
        prog.display(),
        s.p("store").display()
    ));
    let out = sh.output().unwrap();
    let t = text(&out.stdout);
    assert!(
        t.starts_with("open O_CREAT|O_EXCL                      -1 EBUSY"),
        "{t}"
    );
    let err = text(&out.stderr);
    assert!(err.contains("in use by another open store"), "{err}");

    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("fork");
    let out = run(c);
    let t = text(&out.stdout);
    assert!(
        t.contains("child: pread                             -1 EBADF"),
        "{t}"
    );
    assert!(
        t.contains("child: open                              -1 EBADF"),
        "{t}"
    );
    assert!(
        t.contains("parent: pread                            4"),
        "{t}"
    );
    for (what, result) in [
        ("child: fstat", "-1 EBADF"),
        ("child: fstatat empty path", "-1 EBADF"),
        ("child: faccessat empty path", "-1 EBADF"),
        ("child: fchownat empty path", "-1 EBADF"),
        ("child: fcntl F_GETFL", "-1 EBADF"),
        ("child: fchdir", "-1 EBADF"),
        ("parent: fstatat null path", "0 size 4"),
        ("parent: faccessat empty path R_OK", "0"),
        ("parent: faccessat empty path X_OK", "-1 EACCES"),
        ("parent: spawn action opening a store file", "22"),
        ("parent: spawn action opening /dev/null", "0"),
    ] {
        assert!(
            t.contains(&line(what, result)),
            "{what:?} is not {result:?} in:\n{t}"
        );
    }
    assert!(
        t.contains("child: fcntl F_GETFD                     "),
        "{t}"
    );
    assert!(
        !t.contains("child: fcntl F_GETFD                     -1"),
        "{t}"
    );
    assert!(!s.p("store").join("spawned").exists());
    assert!(text(&out.stderr).contains("a child made by fork cannot use it"));
    assert!(
        text(&out.stderr)
            .contains("posix_spawn_file_actions_addopen of a file in SETCACHE_DIR refused")
    );

    // Children forked while another thread reads a store descriptor: none
    // hangs on a lock that thread held at the fork.
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("fork-race");
    let t = text(&run(c).stdout);
    assert!(
        t.contains("children hung                            0"),
        "{t}"
    );
}

#[test]
fn last_closes_after_a_reopen_and_writes_after_the_exit_sync_are_durable() {
    let s = Setup::new("durable");
    let prog = probe(&s.p("bin"), true);
    for mode in ["reopen", "exit-writes"] {
        let mut c = s.preloaded(&prog);
        c.arg(s.p("store")).arg(mode);
        run(c);
    }
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).args(["cat", "r", "j", "x", "xg", "xa"]);
    let t = text(&run(c).stdout);
    assert!(t.contains("r: 5 again"), "{t}");
    assert!(t.contains("j: 7 journal"), "{t}");
    assert!(t.contains("x: 6 onetwo"), "{t}");
    // Grown by `ftruncate` and `posix_fallocate` after the exit's sync.
    assert!(t.contains("xg: 5 \n"), "{t}");
    assert!(t.contains("xa: 7 \n"), "{t}");
}

/// A process that ends by `_exit`, `_Exit` or `quick_exit` (no exit handler runs) with
/// files written and open keeps what it wrote and the lengths it set, as on
/// a local file system; so does a shell, which ends every script so.
#[test]
fn what_a_process_ending_by_underscore_exit_wrote_is_kept() {
    let s = Setup::new("underscore-exit");
    let prog = probe(&s.p("bin"), true);
    for how in ["_exit", "_Exit", "quick_exit"] {
        let mut c = s.preloaded(&prog);
        c.arg(s.p("store")).args(["underscore-exit", how]);
        run(c);
        if how == "quick_exit" {
            // What the program's own `at_quick_exit` handler wrote too.
            let mut c = s.preloaded(&prog);
            c.arg(s.p("store")).args(["cat", "uq"]);
            let t = text(&run(c).stdout);
            assert!(t.contains("uq: 16 by at_quick_exit"), "{t}");
        }
        let mut c = s.preloaded(&prog);
        c.arg(s.p("store")).args(["cat", "ue"]);
        let t = text(&run(c).stdout);
        assert!(t.contains("ue: 13 kept at _exit"), "{how}: {t}");
        let mut c = s.preloaded(&prog);
        c.arg(s.p("store")).args(["stat", "ug"]);
        let t = text(&run(c).stdout);
        assert!(t.contains("size 5000 "), "{how}: {t}");
    }
    let mut c = s.preloaded(Path::new("/bin/sh"));
    c.current_dir(s.p("store"))
        .arg("-c")
        .arg("echo hello > sh1; printf '%s\\n' a b >> sh1; exec 3> sh2; echo x >&3");
    run(c);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).args(["cat", "sh1", "sh2"]);
    let t = text(&run(c).stdout);
    assert!(t.contains("sh1: 10 hello\na\nb\n"), "{t}");
    assert!(t.contains("sh2: 2 x\n"), "{t}");
}

/// A shell's builtins redirected in the shell's own process (bash's `echo`,
/// `printf` and `read` with `>`, `>>`, `<`, `2>` and `>&2`, which go through
/// the C library's standard streams) write and read files of the store.
#[test]
fn a_shells_redirected_builtins_write_and_read_files_of_the_store() {
    let s = Setup::new("builtins");
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(Path::new("/bin/bash"));
    c.current_dir(s.p("store")).arg("-c").arg(
        "echo hello > f; printf '%s\\n' a b >> f; read x < f; echo \"read: $x\"; \
         while read l; do echo \"line: $l\"; done < f; echo to-err 2> e >&2; echo still",
    );
    let out = run(c);
    assert_eq!(
        text(&out.stdout),
        "read: hello\nline: hello\nline: a\nline: b\nstill\n",
        "{}",
        text(&out.stderr)
    );
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).args(["cat", "f", "e"]);
    let t = text(&run(c).stdout);
    assert!(t.contains("f: 10 hello\na\nb\n"), "{t}");
    assert!(t.contains("e: 7 to-err\n"), "{t}");
}

/// Programs a shell runs with their standard streams redirected to and from
/// files of the store (`cmd > f`, `cmd < f`, `>>`, `2>`), which the shell's
/// child opens before it runs the program: the program's store takes up the
/// descriptors it inherits across the `exec` (they were bare placeholders
/// there, and every such program failed with EBADF).
#[test]
fn programs_a_shell_runs_read_and_write_files_of_the_store_on_their_standard_streams() {
    let s = Setup::new("inherited");
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(Path::new("/bin/bash"));
    c.current_dir(s.p("store")).arg("-c").arg(
        "/usr/bin/printf 'c\\nb\\na\\n' > s && sort < s > t && /usr/bin/printf 'd\\n' >> t \
         && { ls /nonexistent-setcache-name 2> e; cat t s > both; } \
         && tr a-z A-Z < both > up && { ls s /nonexistent-setcache-name > both2 2>&1; true; } \
         && tail -c 2 < both2 > tail2 && echo done && { sh -c 'seq 1 2; seq 3 4' > g; echo \"sh: $?\"; }",
    );
    let out = run(c);
    let said = text(&out.stdout);
    assert!(said.starts_with("done\n"), "{said}{}", text(&out.stderr));
    // A description several processes would use in turn: the store keeps no
    // position between processes, so none of them takes it up (each fails
    // with EBADF), rather than the second writing over the first.
    assert!(!said.contains("sh: 0"), "{said}");
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store"))
        .args(["cat", "s", "t", "both", "up", "e", "both2", "tail2", "g"]);
    let t = text(&run(c).stdout);
    assert!(t.contains("s: 6 c\nb\na\n"), "{t}");
    assert!(t.contains("t: 8 a\nb\nc\nd\n"), "{t}");
    assert!(t.contains("both: 14 a\nb\nc\nd\nc\nb\na\n"), "{t}");
    assert!(t.contains("up: 14 A\nB\nC\nD\nC\nB\nA\n"), "{t}");
    assert!(t.contains("nonexistent-setcache-name"), "{t}");
    // Numbers 1 and 2 of one description share its position, as in the
    // kernel (the error first: stdout is buffered to the end).
    assert!(
        t.contains("both2: 63 ls: cannot access '/nonexistent"),
        "{t}"
    );
    assert!(t.contains("tail2: 2 s\n"), "{t}");
    assert!(t.contains("g: 0 \n"), "{t}");
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).args(["stat", "both2"]);
    let t = text(&run(c).stdout);
    assert!(t.contains("size 76 "), "{t}");
}

/// Threads cancelled while they write and sync files of the store are
/// cancelled at those calls, as on a local file system, and the process goes
/// on: a cancel acted on inside the library's own blocking calls would
/// unwind through frames that cannot unwind (the process aborted).
#[test]
fn threads_cancelled_while_they_write_and_sync_are_cancelled_at_their_calls() {
    let s = Setup::new("cancel");
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("cancel");
    let t = text(&run(c).stdout);
    assert!(t.contains("threads cancelled"), "{t}");
    let counts: Vec<u32> = t
        .lines()
        .find_map(|l| l.strip_prefix("threads cancelled"))
        .map(|r| {
            r.split(" of ")
                .filter_map(|x| x.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        counts.len() == 2 && counts[0] == counts[1] && counts[1] >= 2,
        "{t}"
    );
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).args(["cat", "cw"]);
    let t = text(&run(c).stdout);
    assert!(t.contains("cw: 1 x"), "{t}");
}

/// A path through another name of the store's directory (a symbolic link
/// to it) reaches the store's files, as the kernel's would reach a
/// directory's: a file written through the link reads back through the
/// store's own path and through the link, and nothing is made in the
/// directory on disk, where no call of the store would see it.
#[test]
fn paths_through_a_link_to_the_store_reach_its_files() {
    let s = Setup::new("link");
    let prog = probe(&s.p("bin"), true);
    std::os::unix::fs::symlink(s.p("store"), s.p("link")).unwrap();
    let mut c = s.preloaded(&prog);
    c.arg(s.p("link")).args(["put", "lk", "hello"]);
    let t = text(&run(c).stdout);
    assert!(t.contains("lk: put 5 sync 0 close 0"), "{t}");
    assert!(
        std::fs::symlink_metadata(s.p("store").join("lk")).is_err(),
        "the write through the link made a file in the store's directory on disk"
    );
    for d in ["store", "link"] {
        let mut c = s.preloaded(&prog);
        c.arg(s.p(d)).args(["cat", "lk"]);
        let t = text(&run(c).stdout);
        assert!(t.contains("lk: 5 hello"), "read through {d}: {t}");
    }
}

/// Paths with `..` below a name of the store reached through a link to
/// the store's directory (`$OUT/l/f/..` where `l` names it) answer as the
/// kernel's do through a link to a plain directory: `ENOTDIR` below a file
/// (the kernel follows the link, then stops at the file), `ENOENT` below a
/// name the store does not have, for opens, renames, links and unlinks
/// alike. Before, the library took them for paths outside the store, which
/// the kernel answered `ENOENT` and renames `EXDEV`.
#[test]
fn dot_dots_through_a_link_to_the_store_answer_as_the_kernels() {
    let s = Setup::new("dotdot-link");
    let prog = probe(&s.p("bin"), true);
    std::os::unix::fs::symlink(s.p("store"), s.p("l")).unwrap();
    std::os::unix::fs::symlink(s.p("plain"), s.p("pl")).unwrap();
    let mut plain = Command::new(&prog);
    plain.arg(s.p("pl")).arg("dot-dots");
    let plain = text(&run(plain).stdout);
    assert!(plain.contains("-1 ENOTDIR"), "{plain}");
    let mut through = s.preloaded(&prog);
    through.arg(s.p("l")).arg("dot-dots");
    let through = run(through);
    assert_eq!(
        text(&through.stdout),
        plain,
        "through a link to SETCACHE_DIR"
    );
    assert!(through.stderr.is_empty(), "{}", text(&through.stderr));
    assert_eq!(std::fs::read_dir(s.p("store")).unwrap().count(), 0);
}

/// Many threads of one unmodified C program (`tests/threads.c`) on the
/// same file through `pread`, `pwrite` and `fsync`, on one shared descriptor
/// and on descriptors of their own that they close and open again: every
/// page read whole (one write's bytes), each thread's own pages read back
/// as it last wrote them, during the run and through a new descriptor after
/// it, no call failed. The same program on a plain directory checks its own
/// checks against the kernel's page cache (its own pages only: Linux lets a
/// buffered read see part of a write of the same page made at the same
/// moment, which the store does not). `SETCACHE_STRESS_SECS` and
/// `SETCACHE_STRESS_THREADS` as for the crate's stress tests.
#[test]
fn many_threads_on_one_file_through_the_library_lose_nothing() {
    let s = Setup::new("threads");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/threads.c");
    let prog = s.p("bin").join("threads");
    let st = Command::new("cc")
        .args(["-O1", "-Wall", "-Werror", "-pthread"])
        .arg(&src)
        .arg("-o")
        .arg(&prog)
        .status()
        .expect("run cc");
    assert!(st.success(), "cc failed on {}", src.display());
    let var = |name: &str, default: &str| std::env::var(name).unwrap_or(default.to_string());
    let (secs, threads) = (
        var("SETCACHE_STRESS_SECS", "3"),
        var("SETCACHE_STRESS_THREADS", "32"),
    );
    let mut plain = Command::new(&prog);
    plain.arg(s.p("plain")).args([&secs, &threads, "lax"]);
    let plain = text(&run(plain).stdout);
    assert!(plain.starts_with("ok "), "{plain}");
    let mut store = s.preloaded(&prog);
    // A cache of a third of the file: pages evicted and written back all
    // the time.
    store.env("SETCACHE_CACHE_SIZE", "1M");
    store.arg(s.p("store")).args([&secs, &threads]);
    let out = run(store);
    let t = text(&out.stdout);
    assert!(t.starts_with("ok "), "{t}\n{}", text(&out.stderr));
    eprint!("plain directory: {plain}through the library: {t}");
}

/// A link outside the store that names a file of the store (`out/lf` to
/// `SETCACHE_DIR/lf`) is that file for the calls that follow links (`open`,
/// `stat`), as the kernel's would be: a file written through it reads back
/// through the store's path and through the link, and nothing is made in the
/// store's directory on disk, where no call of the store would see it.
#[test]
fn a_link_outside_the_store_to_one_of_its_files_reaches_that_file() {
    let s = Setup::new("filelink");
    let prog = probe(&s.p("bin"), true);
    std::fs::create_dir(s.p("out")).unwrap();
    // One link by its absolute path, one relative to the link's directory
    // through another link.
    std::os::unix::fs::symlink(s.p("store").join("lf"), s.p("out").join("lf")).unwrap();
    std::os::unix::fs::symlink("lf", s.p("out").join("again")).unwrap();
    let mut c = s.preloaded(&prog);
    c.arg(s.p("out")).args(["put", "again", "hello"]);
    let t = text(&run(c).stdout);
    assert!(t.contains("again: put 5 sync 0 close 0"), "{t}");
    assert!(
        std::fs::symlink_metadata(s.p("store").join("lf")).is_err(),
        "the write through the link made a file in the store's directory on disk"
    );
    for (d, name) in [("store", "lf"), ("out", "lf"), ("out", "again")] {
        let mut c = s.preloaded(&prog);
        c.arg(s.p(d)).args(["cat", name]);
        let t = text(&run(c).stdout);
        assert!(
            t.contains(&format!("{name}: 5 hello")),
            "read through {d}/{name}: {t}"
        );
    }
    // The links themselves are still links, outside the store.
    assert!(
        std::fs::symlink_metadata(s.p("out").join("lf"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // A hard link of what the link names, as of any file of the store,
    // is refused `EXDEV` (the kernel would look for it on disk, `ENOENT`);
    // a flag `linkat` does not know, `EINVAL` first.
    let mut c = s.preloaded(&prog);
    let to = s.p("out").join("hard");
    c.arg(s.p("out")).args(["link", "lf"]).arg(&to);
    let t = text(&run(c).stdout);
    let words = t.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(words.contains("linkat AT_SYMLINK_FOLLOW -1 EXDEV"), "{t}");
    assert!(words.contains("linkat unknown flag -1 EINVAL"), "{t}");
    // So is one of its open descriptor (`AT_EMPTY_PATH`).
    assert!(words.contains("linkat AT_EMPTY_PATH -1 EXDEV"), "{t}");
    // By descriptor, in the kernel's order: a name in use, then a directory
    // (which has no second name), then across file systems; a deleted file
    // has no name to give.
    let mut c = s.preloaded(&prog);
    let outside = s.p("out").join("plain");
    c.arg(s.p("store")).arg("link-fds").arg(&outside).arg("lfd");
    let t = text(&run(c).stdout);
    let words = t.split_whitespace().collect::<Vec<_>>().join(" ");
    for want in [
        "outside file to a new store name -1 EXDEV",
        "outside file to a store name in use -1 EEXIST",
        "the store's directory to outside -1 EPERM",
        "store file to outside -1 EXDEV",
        "deleted store file to outside -1 ENOENT",
    ] {
        assert!(words.contains(want), "no {want:?} in:\n{t}");
    }
    assert!(std::fs::symlink_metadata(&to).is_err(), "a link was made");
    // `lf/` names a directory, which the file is not; a link to the
    // store's directory lists the store.
    let mut c = s.preloaded(&prog);
    c.arg(s.p("out")).args(["stat", "lf", "lf/"]);
    let t = text(&run(c).stdout);
    assert!(
        t.contains("lf                                       size 5 regular 1"),
        "{t}"
    );
    assert!(
        t.contains("lf/                                      -1 ENOTDIR"),
        "{t}"
    );
    std::os::unix::fs::symlink(s.p("store"), s.p("storelink")).unwrap();
    let mut c = s.preloaded(&prog);
    c.arg(s.p("storelink")).arg("ls");
    let t = text(&run(c).stdout);
    assert!(
        t.contains("ls                                       . .. lf"),
        "{t}"
    );
}

/// A file of the store opened again through `/proc/self/fd/N` or
/// `/dev/fd/N` is that file, as the kernel reopens a file there: the link
/// names the placeholder's directory, the store's, which the kernel would
/// open instead.
#[test]
fn a_store_file_reopened_through_proc_self_fd_is_that_file() {
    let s = Setup::new("reopen");
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).args(["put", "rf", "hello"]);
    run(c);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).args(["reopen-fd", "rf"]);
    let t = text(&run(c).stdout);
    assert!(t.contains("reopen /proc/self/fd/%d: 5 hello"), "{t}");
    assert!(t.contains("reopen /dev/fd/%d: 5 hello"), "{t}");
    assert!(t.contains("reopen /proc/self/task/T/fd/N: 5 hello"), "{t}");
    assert!(t.contains("reopen /dev/stdin: 5 hello"), "{t}");
    // Nothing below it, and not the file made under its name since.
    assert!(
        t.contains("open /proc/self/fd/N/x O_CREAT           -1 ENOTDIR"),
        "{t}"
    );
    assert!(
        t.contains("x after                                  -1 ENOENT"),
        "{t}"
    );
    assert!(
        t.contains("open /proc/self/fd/N/../N                -1 ENOTDIR"),
        "{t}"
    );
    assert!(!t.contains("reopen after the delete: 5 other"), "{t}");
    assert!(
        t.contains("reopen after the delete                  -1 ESTALE"),
        "{t}"
    );
    // Its link reads as the file's path, cut short as asked, and marked
    // once the file is deleted, as the kernel's link of a file reads.
    let at = std::fs::canonicalize(s.p("store")).unwrap().join("rf");
    let at = at.display();
    let n = at.to_string().len();
    assert!(
        t.contains(&format!("readlink /proc/self/fd/N: {n} {at}|")),
        "{t}"
    );
    assert!(
        t.contains(&format!("__readlink_chk /proc/self/fd/N: {n} {at}|")),
        "{t}"
    );
    assert!(
        t.contains(&format!("canonicalize_file_name /proc/self/fd/N: {at}|")),
        "{t}"
    );
    assert!(t.contains(&format!("realpath NAME: {at}|")), "{t}");
    let three = &at.to_string()[..3];
    assert!(
        t.contains(&format!(
            "readlink /proc/self/fd/N into 3 bytes: 3 {three}|"
        )),
        "{t}"
    );
    assert!(
        t.contains(&format!(
            "readlink /proc/self/fd/N after the delete: {} {at} (deleted)|",
            n + 10
        )),
        "{t}"
    );
}

/// A walk that starts at `q/..`, where `q` is a symbolic link, walks the
/// parent of `q`'s target, as the kernel resolves it: a directory there that
/// happens to be named `store` is that directory (its files shown), not
/// the store's by the start's spelling; and a file opened through such a
/// path is that directory's.
#[test]
fn a_walk_from_a_links_parent_is_where_the_link_leads() {
    let s = Setup::new("walk-dotdot");
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).args(["put", "mine", "x"]);
    run(c);
    // root/q -> root/elsewhere/x; root/elsewhere/store/real holds a file.
    let elsewhere = s.p("elsewhere");
    std::fs::create_dir_all(elsewhere.join("x")).unwrap();
    std::fs::create_dir_all(elsewhere.join("store")).unwrap();
    std::fs::write(elsewhere.join("store").join("real"), b"r").unwrap();
    std::os::unix::fs::symlink(elsewhere.join("x"), s.p("q")).unwrap();
    let start = format!("{}/q/..", s.root.display());
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).args(["walk", &start]);
    let t = text(&run(c).stdout);
    assert!(
        t.lines()
            .any(|l| l.starts_with("walk ") && l.split_whitespace().nth(1) == Some("0")),
        "{t}"
    );
    assert!(
        t.contains(&format!("walked {start}/store/real\n")),
        "the file under the other directory named store was hidden:\n{t}"
    );
    assert!(
        !t.contains("/mine"),
        "the store's files shown in another directory:\n{t}"
    );
    // A file opened through the same start is that directory's, not the
    // store's file of the same name.
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).args(["put", "real", "sss"]);
    run(c);
    let mut c = s.preloaded(&prog);
    c.arg(format!("{start}/store")).args(["cat", "real"]);
    let t = text(&run(c).stdout);
    assert!(
        t.contains("real: 1 r"),
        "the store's file read in another's place:\n{t}"
    );
}

/// A program whose main thread ends with `pthread_exit` while another thread
/// still writes ends once that thread does (the store's own threads do not
/// keep it alive), with the other thread's bytes kept: whether the main
/// thread used the store before it ended or the other thread opens it later.
#[test]
fn a_main_thread_ending_first_leaves_the_process_to_end_with_its_last_thread() {
    let s = Setup::new("main-ends");
    let prog = probe(&s.p("bin"), true);
    for mode in ["main-ends-first", "main-ends-untouched"] {
        let mut child = s
            .preloaded(&prog)
            .arg(s.p("store"))
            .arg(mode)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("run the probe");
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().expect("wait for the probe") {
                break st;
            }
            if start.elapsed() > std::time::Duration::from_secs(20) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{mode}: the process was still running 20 s after its threads ended");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert!(status.success(), "{mode}: {status}");
    }
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).args(["cat", "pm", "pt", "pu"]);
    let t = text(&run(c).stdout);
    for want in ["pm: 4 main", "pt: 4 late", "pu: 4 late"] {
        assert!(t.contains(want), "{want} missing:\n{t}");
    }
}

/// A thread-specific value's destructor runs after the thread's Rust
/// thread-locals (the library's and setcache's) are gone: its calls on store
/// files must still work (a thread-local's access would panic, aborting in
/// the library's C functions), and their bytes outlive the process.
#[test]
fn calls_from_a_threads_last_destructors_work() {
    let s = Setup::new("late-dtor");
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("late-dtor");
    let out = run(c);
    let t = text(&out.stdout);
    for i in 1..=4 {
        let want = format!("dt{i}: write 6 read 6 dtor {i} sync 0 close 0");
        assert!(
            t.contains(&want),
            "{want} missing:\n{t}{}",
            text(&out.stderr)
        );
    }
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).args(["cat", "dt1", "dt4"]);
    let t = text(&run(c).stdout);
    for want in ["dt1: 6 dtor 1", "dt4: 6 dtor 4"] {
        assert!(t.contains(want), "{want} missing:\n{t}");
    }
}

/// A file's last close syncs it even while another thread looks the file up
/// by name at that moment (a `stat` holds the file a while): each of 64
/// files closed once, opened, written and closed under such lookups has its
/// bytes after an exit that runs no exit handler. Eight processes in turn:
/// the files a process still keeps open at its end are those at risk.
#[test]
fn a_last_close_syncs_while_another_thread_stats_the_file() {
    let s = Setup::new("close-race");
    let prog = probe(&s.p("bin"), true);
    let mut names = Vec::new();
    for run_no in 0..8 {
        let prefix = format!("cr{run_no}-");
        let mut c = s.preloaded(&prog);
        c.arg(s.p("store")).args(["close-race", &prefix]);
        run(c);
        names.extend((0..64).map(|i| format!("{prefix}{i}")));
    }
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("cat").args(&names);
    let t = text(&run(c).stdout);
    for n in &names {
        assert!(
            t.contains(&format!("{n}: 6 synced")),
            "{n} lost its bytes:\n{t}"
        );
    }
}

/// A descriptor that `dup2` makes, again and again, a copy of one file of
/// the store or of another's, while another thread writes through it: each
/// write reaches one of the two files, as the kernel's would; none fails for
/// finding the number standing for nothing between the two.
#[test]
fn a_write_beside_dup2_between_two_files_of_the_store_never_fails() {
    let s = Setup::new("dup2race");
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("dup2-race");
    let t = text(&run(c).stdout);
    assert!(
        t.contains("dup2 race: failed dup2                   0"),
        "{t}"
    );
    assert!(
        t.contains("dup2 race: failed writes                 0"),
        "{t}"
    );
}

/// Truncates by name, and closes of descriptors opened read-only, while
/// another thread replaces the file again and again by a rename: none fails
/// (the store's old file found replaced under a sync is one the store
/// replaced itself, gone, not one taken away behind its back).
#[test]
fn calls_beside_a_rename_replacing_their_file_do_not_fail() {
    let s = Setup::new("replace-race");
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("replace-race");
    let t = text(&run(c).stdout);
    assert!(
        t.contains("replace race: failed truncates           0"),
        "{t}"
    );
    assert!(
        t.contains("replace race: failed closes              0"),
        "{t}"
    );
}

/// A create that finds the process out of descriptors fails `EMFILE`, as the
/// kernel's does, even when the store, withdrawing the failed create's
/// record, ran out of them too (it said `EIO`).
#[test]
fn a_create_out_of_descriptors_says_emfile() {
    let s = Setup::new("emfile");
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("emfile");
    let t = text(&run(c).stdout);
    assert!(
        t.contains("create past the descriptors              EMFILE"),
        "{t}"
    );
    assert!(
        t.contains("opened before                            some"),
        "{t}"
    );
}

/// The wide calls on standard streams that are copies of a store file's
/// descriptor (`putwchar`, `wprintf`, `__wprintf_chk`, `getwchar`) and the
/// fortified `fgetws` work as on the kernel's files (before, the first three
/// ended the program with SIGSEGV, and `wprintf` wrote nothing and said
/// nothing); a wide scan of a store stream is refused, saying so, where it
/// failed saying nothing.
#[test]
fn wide_calls_on_standard_streams_over_store_files_work() {
    let s = Setup::new("wide-std");
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("wide-std");
    let out = run(c);
    let e = text(&out.stderr);
    for want in [
        "putwchar 1 wprintf 7 __wprintf_chk 6 fflush 0\n",
        "written 17: \u{e9}|42|\u{20ac}|\n    7\n",
        "getwchar 233 120\n",
        "__fgetws_chk line 3\n",
        "fwscanf -1 errno Operation not supported 0\n",
        "fwscanf on a stream of a file of the store is not served",
    ] {
        assert!(e.contains(want), "no {want:?} in:\n{e}");
    }
    // The kernel's files: the same, but for the scan.
    let dir = s.p("plain");
    std::fs::create_dir_all(&dir).unwrap();
    let k = Command::new(&prog)
        .arg(&dir)
        .arg("wide-std")
        .output()
        .unwrap();
    let k = text(&k.stderr);
    assert!(
        k.contains("written 17: \u{e9}|42|\u{20ac}|\n    7\n"),
        "{k}"
    );
    assert!(k.contains("fwscanf 2 errno - 12"), "{k}");
}

/// The figures of a store file's file system, asked by path or by
/// descriptor, give the store's limit on names (200 bytes, where the file
/// systems under it take 255): a program that sizes its names by them makes
/// names the store takes. Before, they were the directory's on disk, and a
/// name of 201-255 bytes that they allowed failed `ENAMETOOLONG`.
#[test]
fn the_stores_figures_give_its_limit_on_names() {
    let s = Setup::new("names");
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).args(["names", "n1"]);
    let t = text(&run(c).stdout);
    for want in [
        "statvfs 0 200\n",
        "statfs 0 200\n",
        "pathconf 200\n",
        "fstatvfs 0 200\n",
        "fstatfs 0 200\n",
        "fpathconf 200\n",
        "pathconf of the directory 200\n",
        "fstatvfs of the directory 0 200\n",
    ] {
        assert!(t.contains(want), "no {want:?} in:\n{t}");
    }
    // Outside the store, the library changes nothing.
    let dir = s.p("outside");
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = s.preloaded(&prog);
    c.arg(&dir).args(["names", "n1"]);
    let t = text(&run(c).stdout);
    assert!(t.contains("fstatvfs 0 255\n"), "{t}");
    assert!(t.contains("pathconf of the directory 255\n"), "{t}");
    // A name of the longest length they give is taken; one byte more is not.
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).args(["names", &"n".repeat(200)]);
    let t = text(&run(c).stdout);
    assert!(t.contains("fpathconf 200\n"), "{t}");
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).args(["names", &"n".repeat(201)]);
    let t = text(&run(c).stdout);
    assert!(t.contains("fstatvfs -1 "), "{t}");
}

/// A reader following a file another thread appends to never finds zeros
/// below the length `fstat` gives: an append shows its new length only once
/// its bytes are in, as on a local file system.
#[test]
fn a_reader_never_sees_an_append_s_length_before_its_bytes() {
    let s = Setup::new("tail");
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("tail-race");
    let t = text(&run(c).stdout);
    let count = |what: &str| -> u64 {
        t.lines()
            .find_map(|l| l.strip_prefix(what).map(|v| v.trim().parse().unwrap()))
            .unwrap_or_else(|| panic!("no {what:?} in:\n{t}"))
    };
    assert!(count("tail reads ") > 10, "{t}");
    assert_eq!(count("tail reads with zeros"), 0, "{t}");
}

/// A write inside a file that another thread's `ftruncate` cuts meanwhile
/// grows the file, as the kernel's does, instead of failing `EFBIG`; a call
/// with a path relative to a long working directory leaves `errno` alone.
#[test]
fn a_write_a_shrink_cuts_grows_the_file_and_a_long_cwd_keeps_errno() {
    let s = Setup::new("shrink");
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("shrink-race");
    let out = run(c);
    let t = text(&out.stdout);
    for (what, result) in [
        ("writes made", "1"),
        ("writes failed", "0"),
        ("stat in a long working directory", "0 0"),
    ] {
        assert!(
            t.contains(&line(what, result)),
            "{what:?} is not {result:?} in:\n{t}\nstderr:\n{}",
            text(&out.stderr)
        );
    }
}

/// What a process wrote outlives it when it replaces itself by `exec`, and
/// when it ends in `_exit` after `sync()`, after `syncfs` of a store file,
/// or after `dup2` replaced a file's last descriptor: as on a local file
/// system, where the kernel keeps it.
#[test]
fn exec_sync_syncfs_and_dup2_keep_what_was_written() {
    let s = Setup::new("implicit");
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("exec-write");
    let t = text(&run(c).stdout);
    assert!(t.contains("e: 4 data"), "the image after exec read:\n{t}");
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("implicit-syncs");
    run(c);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).args(["cat", "k", "s", "y"]);
    let t = text(&run(c).stdout);
    assert!(t.contains("k: 4 dup2"), "{t}");
    assert!(t.contains("s: 6 synced"), "{t}");
    assert!(t.contains("y: 2 fs"), "{t}");
}

/// A line of the probe's output: `what`, padded, and its result.
fn line(what: &str, result: &str) -> String {
    format!("{what:<40} {result}\n")
}

/// A program that closes descriptors wholesale (`close_range`, `closefrom`)
/// or duplicates onto a number it did not open leaves the store's own
/// descriptors (backing files, rings, lock files) open: the writes around
/// it reach the devices, and flags the kernel refuses are refused before
/// the library's table changes.
#[test]
fn descriptors_closed_wholesale_leave_the_stores_own_open() {
    let s = Setup::new("close-all");
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("close-all");
    let out = run(c);
    let t = text(&out.stdout);
    for (what, result) in [
        ("write first", "5"),
        ("store descriptors besides the file", "1"),
        ("close_range above the file", "0"),
        ("store descriptors left open", "1"),
        ("dup2 onto one of the store's", "-1 EBADF"),
        ("dup3 onto one of the store's", "-1 EBADF"),
        ("close one of the store's", "-1 EBADF"),
        ("pwrite second", "6"),
        ("fsync", "0"),
        ("close_range, unknown flag", "-1 EINVAL"),
        ("close_range, first past last", "-1 EINVAL"),
        ("close_range, unshare", "-1 EINVAL"),
        ("pwrite after the refused ones", "1"),
        ("close_range, cloexec", "0"),
        ("pwrite third", "5"),
        ("fcntl of the file after closefrom", "-1 EBADF"),
        ("store descriptors after closefrom", "1"),
        ("pread", "17"),
        ("the file holds", "firstsecond+third"),
    ] {
        assert!(
            t.contains(&line(what, result)),
            "{what:?} is not {result:?} in:\n{t}\nstderr:\n{}",
            text(&out.stderr)
        );
    }
    assert!(
        text(&out.stderr).contains("refused: it is one of the store's own"),
        "{}",
        text(&out.stderr)
    );
    // What the process wrote was synced at its exit, through the store's
    // descriptors.
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).args(["cat", "ca"]);
    let t = text(&run(c).stdout);
    assert!(t.contains("ca: 17 firstsecond+third"), "{t}");
}

/// A child made by `fork`, or by the raw system call (which runs no
/// `atfork` handler), that outlives its parent does not keep the store's
/// roots locked: the next process opens the store while the child lives.
#[test]
fn a_forked_child_that_outlives_its_parent_leaves_the_roots_unlocked() {
    let s = Setup::new("outlive");
    let prog = probe(&s.p("bin"), true);
    for how in ["fork", "raw"] {
        let mut c = s.preloaded(&prog);
        c.arg(s.p("store")).args(["fork-outlive", how]);
        let t = text(&run(c).stdout);
        assert!(t.contains(&line("forked", "1")), "{how}: {t}");
        assert!(
            t.contains(&line("child: dup2 onto a store number", "1")),
            "{how}: {t}"
        );
        assert!(t.contains(&line("child: close of it", "0")), "{how}: {t}");
        // The child lives 4 s more; a new process opens the store meanwhile.
        let mut c = s.preloaded(&prog);
        c.arg(s.p("store")).args(["cat", "fo"]);
        let out = run(c);
        let t = text(&out.stdout);
        assert!(
            t.contains("fo: 6 parent"),
            "{how}: {t}\nstderr:\n{}",
            text(&out.stderr)
        );
    }
}

/// Sizes in the environment that the library cannot use are refused with
/// a message naming the setting and what is wrong with it: a page size of
/// 4 GiB (once read as 0 after its narrowing) and a cache of no bytes.
#[test]
fn bad_sizes_in_the_environment_are_named() {
    let s = Setup::new("bad-sizes");
    for (var, value, says) in [
        (
            "SETCACHE_PAGE_SIZE",
            "4G",
            "SETCACHE_PAGE_SIZE=4294967296 is larger than the largest page",
        ),
        (
            "SETCACHE_CACHE_SIZE",
            "0",
            "SETCACHE_CACHE_SIZE=\"0\": the size must be above 0",
        ),
    ] {
        let mut c = s.preloaded(Path::new("/bin/sh"));
        c.env(var, value)
            .arg("-c")
            .arg(format!("echo hi > {}", s.p("store").join("x").display()));
        let out = c.output().expect("run sh");
        let err = text(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{var}={value}: status {:?}, stderr:\n{err}",
            out.status
        );
    }
}

/// A small tmpfs mounted at `mnt` with two device directories, taken down
/// when dropped (detached if still busy); `None` (and why) where this process
/// may not mount, which fails the test instead when `CI` is set.
/// A test that cannot make what it needs (`what`, for `why`) is skipped,
/// with a word on stderr; where `CI` is set it fails instead.
fn skipped_unless_ci(what: &str, why: &str) {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(!ci, "CI is set, but {what} ({why})");
    eprintln!("skipped: {what} ({why})");
}

struct SmallFs(PathBuf);

impl SmallFs {
    fn mount(mnt: PathBuf, size: &str) -> Option<SmallFs> {
        std::fs::create_dir_all(&mnt).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mnt)
            .output()
            .expect("run mount");
        if !mounted.status.success() {
            skipped_unless_ci("a small tmpfs cannot be mounted", &text(&mounted.stderr));
            return None;
        }
        for d in ["dev0", "dev1"] {
            std::fs::create_dir_all(mnt.join(d)).unwrap();
        }
        Some(SmallFs(mnt))
    }

    /// `SETCACHE_DEVICES` for its two directories.
    fn devices(&self) -> String {
        format!(
            "{},{}",
            self.0.join("dev0").display(),
            self.0.join("dev1").display()
        )
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let umount = |lazy: bool| {
            let mut u = Command::new("umount");
            if lazy {
                u.arg("-l");
            }
            let st = u.arg(&self.0).stderr(std::process::Stdio::null()).status();
            st.is_ok_and(|st| st.success())
        };
        let mut tries = 0;
        while !umount(tries == 50) && tries < 50 {
            tries += 1;
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// A small ext2 file system on a loop device: one that cannot allocate
/// ahead (`fallocate` is `EOPNOTSUPP`), so that writes into a file's holes
/// take no space until their write-back.
struct NoAllocFs {
    dir: PathBuf,
    dev: String,
    image: PathBuf,
}

impl NoAllocFs {
    fn mount(dir: PathBuf, kib: u64) -> Option<NoAllocFs> {
        let image = dir.with_extension("img");
        let run = |cmd: &str, args: &[&str]| -> Result<String, String> {
            let out = Command::new(cmd)
                .args(args)
                .output()
                .map_err(|e| format!("{cmd}: {e}"))?;
            if out.status.success() {
                Ok(text(&out.stdout).trim().to_string())
            } else {
                Err(format!("{cmd}: {}", text(&out.stderr).trim()))
            }
        };
        let made = (|| {
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            let f = std::fs::File::create(&image).map_err(|e| e.to_string())?;
            f.set_len(kib << 10).map_err(|e| e.to_string())?;
            let img = image.to_str().unwrap();
            let dev = run("losetup", &["-f", "--show", img])?;
            let fs = NoAllocFs {
                dir: dir.clone(),
                dev: dev.clone(),
                image: image.clone(),
            };
            run("mkfs.ext2", &["-q", &dev])?;
            run("mount", &[&dev, dir.to_str().unwrap()])?;
            for d in ["dev0", "dev1"] {
                std::fs::create_dir_all(dir.join(d)).map_err(|e| e.to_string())?;
            }
            Ok::<_, String>(fs)
        })();
        if let Err(why) = &made {
            let _ = std::fs::remove_file(&image);
            skipped_unless_ci("a loop file system cannot be made", why);
        }
        made.ok()
    }

    /// `SETCACHE_DEVICES` for its two directories.
    fn devices(&self) -> String {
        format!(
            "{},{}",
            self.dir.join("dev0").display(),
            self.dir.join("dev1").display()
        )
    }
}

impl Drop for NoAllocFs {
    fn drop(&mut self) {
        for lazy in [false, true] {
            let mut u = Command::new("umount");
            if lazy {
                u.arg("-l");
            }
            let st = u
                .arg(&self.dir)
                .stderr(std::process::Stdio::null())
                .status();
            if st.is_ok_and(|st| st.success()) {
                break;
            }
        }
        let _ = Command::new("losetup")
            .args(["-d", &self.dev])
            .stderr(std::process::Stdio::null())
            .status();
        let _ = std::fs::remove_file(&self.image);
    }
}

/// An `exec` whose sync of the store fails (the devices on a file system
/// too small for what was written, which cannot take the space of writes
/// into holes ahead) is refused with the sync's error, where the new image
/// would have dropped the pages this one holds.
#[test]
fn an_exec_whose_sync_fails_is_refused() {
    let s = Setup::new("exec-full");
    let prog = probe(&s.p("bin"), true);
    let Some(fs) = NoAllocFs::mount(s.p("small"), 1024) else {
        return;
    };
    let mut c = s.preloaded(&prog);
    c.env("SETCACHE_DEVICES", fs.devices());
    c.arg(s.p("store")).arg("exec-full");
    let out = c.output().expect("run the probe");
    // Unmounted before the setup's directory goes.
    drop(fs);
    let t = text(&out.stdout);
    let line = t
        .lines()
        .find(|l| l.starts_with("exec after a failed sync"))
        .unwrap_or_else(|| panic!("the exec went ahead:\n{t}\n{}", text(&out.stderr)));
    assert!(line.ends_with("-1 ENOSPC"), "{line}");
}

/// Run the probe's `mode` on devices on a tmpfs of 4 MiB (with `ballast`,
/// the path of a file there outside the store as its argument) and check
/// that its transcript has every line of `want`. Skipped where no tmpfs can
/// be mounted (outside CI).
fn on_a_small_fs(tag: &str, mode: &str, ballast: bool, want: &[String]) {
    let s = Setup::new(tag);
    let prog = probe(&s.p("bin"), true);
    let Some(fs) = SmallFs::mount(s.p("small"), "4m") else {
        return;
    };
    let mut c = s.preloaded(&prog);
    c.env("SETCACHE_DEVICES", fs.devices());
    c.arg(s.p("store")).arg(mode);
    if ballast {
        c.arg(fs.0.join("ballast"));
    }
    let out = c.output().expect("run the probe");
    drop(fs);
    let t = text(&out.stdout);
    for w in want {
        assert!(
            t.contains(w),
            "{mode}: no {w:?} in:\n{t}\nstderr:\n{}",
            text(&out.stderr)
        );
    }
}

/// `posix_fallocate` on a store file reserves the devices' space: one
/// larger than the room fails `ENOSPC`, and the range of one that fits is
/// written back at `fsync` and `close` after everything else on the file
/// system was taken.
#[test]
fn posix_fallocate_reserves_the_devices_space() {
    on_a_small_fs(
        "fallocate-full",
        "fallocate-full",
        true,
        &[
            line("reserve past the room", "-1 ENOSPC"),
            line("reserve 1 MiB", "0"),
            line("size", "1048576"),
            line("ballast filled the rest", "1 ENOSPC"),
            line("writes failed", "0"),
            line("fsync", "0"),
            line("close", "0"),
        ],
    );
}

/// Appends to a store file on a full file system fail at the write, with
/// `ENOSPC`, as a local file system's do: a program that never checks its
/// `close` (or never makes one) learns of it, and what it wrote before stays
/// whole. (The write-back at `fsync` and `close` failed instead, and the
/// file was left shorter than the writes that had succeeded.)
#[test]
fn appends_past_the_room_fail_at_the_write() {
    on_a_small_fs(
        "append-full",
        "append-full",
        false,
        &[
            line("a write failed", "1 ENOSPC"),
            line("some were written", "1"),
            line("fsync", "0"),
            line("close", "0"),
            line("read back as long", "1"),
            line("read back the same", "1"),
            line("close again", "0"),
        ],
    );
}

/// Writes into the holes of a file grown by `ftruncate` past the room of a
/// small file system fail at the write, `ENOSPC`, as a local file system's
/// do; everything written before reads back after `fsync` and `close`
/// succeed. (They took no space: every write succeeded, and the write-back
/// failed at `fsync`, which a program may not check.)
#[test]
fn writes_into_holes_past_the_room_fail_at_the_write() {
    on_a_small_fs(
        "hole-full",
        "hole-full",
        false,
        &[
            line("grow past the room", "0"),
            line("a write far in", "65536"),
            line("a write failed", "1 ENOSPC"),
            line("some were written", "1"),
            line("fsync", "0"),
            line("close", "0"),
            line("size", "67108864"),
            line("read back the same", "1"),
            line("close again", "0"),
        ],
    );
}

/// What an open file's appends reserved past its end yields to another
/// file's writes on a full file system, as a local file system's
/// preallocation does: the second file's writes fail only once it is taken,
/// and the first file's close frees nothing more. (It stayed the first
/// file's until its close: "room after the first closed 1".)
#[test]
fn space_reserved_ahead_yields_to_other_files() {
    on_a_small_fs(
        "yield-full",
        "yield-full",
        false,
        &[
            line("writes of the first failed", "0"),
            line("the second took the rest", "1 ENOSPC"),
            line("close the first", "0"),
            line("room after the first closed", "0"),
            line("fsync", "0"),
            line("close", "0"),
        ],
    );
}

/// Space a program reserved past the end (`FALLOC_FL_KEEP_SIZE`) outlives
/// the file's last close: after a new open on a full file system, writes
/// into it succeed and are written back. (The last close gave it back with
/// the library's own reservations: "writes into the range failed 16".)
#[test]
fn space_kept_past_the_end_outlives_the_last_close() {
    on_a_small_fs(
        "kept-full",
        "kept-full",
        true,
        &[
            line("write", "4096"),
            line("reserve past the end", "0"),
            line("close", "0"),
            line("ballast filled the rest", "1 ENOSPC"),
            line("writes into the range failed", "0"),
            line("fsync", "0"),
            line("close again", "0"),
        ],
    );
}

/// A sparse file cut on a full file system to a length inside a hole, not
/// on a page's edge: the cut, the `fsync` and the `close` succeed, as the
/// kernel's. (The cut left the page of the new end dirty, whose write-back
/// found no room: "fsync -1 ENOSPC", and `truncate(1)` failed at its close.)
#[test]
fn a_cut_inside_a_hole_on_a_full_file_system_needs_no_room() {
    on_a_small_fs(
        "cut-hole-full",
        "cut-hole-full",
        true,
        &[
            line("grow past the room", "0"),
            line("ballast filled the rest", "1 ENOSPC"),
            line("cut inside a hole", "0"),
            line("size", "20000001"),
            line("fsync", "0"),
            line("close", "0"),
        ],
    );
}

/// A write at the end of a file cut inside a block, with room for its own
/// pages alone: the growth it makes clears the rest of the block, and keeps
/// the pages the write reserved; their write-back at `fsync` succeeds once
/// the rest of the file system is taken. (The clearing gave them back: the
/// `fsync` failed `ENOSPC`, the write the program saw succeed lost.)
#[test]
fn a_growth_keeps_the_space_its_write_reserved() {
    on_a_small_fs(
        "regrow-full",
        "regrow-full",
        true,
        &[
            line("writes failed", "0"),
            line("cut inside a block", "0"),
            line("room for three pages", "0"),
            line("a write at the end", "5000"),
            line("fsync after the rest was taken", "0"),
            line("close", "0"),
            line("read back the same", "1"),
        ],
    );
}

/// A file cut on a full file system: the cut needs no room (it makes some),
/// as the kernel's. (Its intent record found no room, and the cut failed
/// `ENOSPC`: SQLite's rollback of a transaction that had filled the devices
/// failed that way, leaving a hot journal that no later open could roll back.)
#[test]
fn a_cut_on_a_full_file_system_succeeds_and_gives_the_space_back() {
    on_a_small_fs(
        "cut-full",
        "cut-full",
        true,
        &[
            line("fsync", "0"),
            line("ballast filled the rest", "1 ENOSPC"),
            line("cut on a full file system", "0"),
            line("size after the cut", "4096"),
            line("fsync after the cut", "0"),
            line("the space came back", "1"),
            line("close", "0"),
        ],
    );
}

/// `execl`, `execlp` and `execle` (variadic: read from the calling
/// convention's slots) sync the store as the other `exec` functions do,
/// with a list long enough that part of it is on the stack.
#[test]
fn execl_execlp_and_execle_keep_what_was_written() {
    let s = Setup::new("execl");
    let prog = probe(&s.p("bin"), true);
    for (mode, want) in [
        ("execl-write", "l: 11 execl-write"),
        ("execlp-write", "lp: 12 execlp-write"),
        ("execle-write", "le: 12 execle-write"),
    ] {
        let mut c = s.preloaded(&prog);
        c.arg(s.p("store")).arg(mode);
        let t = text(&run(c).stdout);
        assert_eq!(
            t.lines().filter(|l| *l == want).count(),
            7,
            "the image after {mode} read:\n{t}"
        );
    }
}

/// A store another process holds is refused (`EBUSY`, and `EBADF` for a
/// descriptor inherited across `exec`) but not for good: once that process
/// has let it go, the same program opens files of the store and takes up the
/// inherited descriptor at its position.
#[test]
fn a_store_another_process_held_is_opened_once_it_lets_go() {
    let s = Setup::new("busy");
    let prog = probe(&s.p("bin"), true);
    let marks = s.p("outside");
    let wait_for = |name: &str| {
        let p = marks.join(name);
        let start = std::time::Instant::now();
        while !p.exists() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "no marker {name}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("inherit-busy").arg(&marks);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(run(c));
    });
    // Between the exec and the new image's first use, another process
    // takes the store.
    wait_for("execd");
    let mut holder = s.preloaded(&prog);
    holder.arg(s.p("store")).arg("hold").arg(&marks);
    let (htx, hrx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = htx.send(run(holder));
    });
    wait_for("tried");
    std::fs::write(marks.join("release"), b"").unwrap();
    let held = hrx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the holder ended");
    assert!(
        text(&held.stdout).contains(&line("holder released", "0")),
        "{}",
        text(&held.stdout)
    );
    std::fs::write(marks.join("released"), b"").unwrap();
    let out = rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the probe ended");
    let t = text(&out.stdout);
    for (what, result) in [
        ("its descriptor", "3"),
        ("write while it holds it", "-1 EBADF"),
        ("open while it holds it", "-1 EBUSY"),
        ("write once it is gone", "4"),
        ("open once it is gone", "4"),
        ("write the new file", "4"),
        ("stat inh", "size 8 regular 1 mode 644"),
    ] {
        assert!(
            t.contains(&line(what, result)),
            "{what:?} is not {result:?} in:\n{t}\n{}",
            text(&out.stderr)
        );
    }
    assert!(
        text(&out.stderr).contains("tried again at the next call"),
        "{}",
        text(&out.stderr)
    );
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("cat").arg("inh").arg("other");
    let t = text(&run(c).stdout);
    assert!(t.contains("inh: 8 one\ntwo\n"), "{t}");
    assert!(t.contains("other: 4 new\n"), "{t}");
}

/// A program that makes and closes many files one after another under a
/// small descriptor limit, on a store of many devices, never runs out of
/// descriptors: files kept open after their last close are fewer where each
/// holds one per device, and an open that meets the limit lets go of them
/// and tries again. Before, 32 closed files were kept whatever the devices
/// (`tar -x` of 1,000 files onto 24 devices stopped after 39 with "Too many
/// open files").
#[test]
fn files_made_one_by_one_on_many_devices_never_run_out_of_descriptors() {
    let s = Setup::new("fds");
    let devices: Vec<String> = (0..24)
        .map(|i| {
            let d = s.p(&format!("many{i}"));
            std::fs::create_dir_all(&d).unwrap();
            d.display().to_string()
        })
        .collect();
    let store = s.p("store");
    let mut sh = s.preloaded(Path::new("/bin/sh"));
    sh.env("SETCACHE_DEVICES", devices.join(","))
        .arg("-c")
        .arg(format!(
            "ulimit -n 256; i=0; while [ $i -lt 150 ]; do \
         echo \"line $i\" > {d}/f$i || exit 1; i=$((i+1)); done; echo made $i",
            d = store.display()
        ));
    let out = run(sh);
    assert!(
        text(&out.stdout).contains("made 150"),
        "{}",
        text(&out.stderr)
    );
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(&prog);
    c.env("SETCACHE_DEVICES", devices.join(","))
        .arg(&store)
        .arg("cat")
        .arg("f0")
        .arg("f77")
        .arg("f149");
    let t = text(&run(c).stdout);
    for (name, line) in [("f0", "line 0"), ("f77", "line 77"), ("f149", "line 149")] {
        assert!(
            t.contains(&format!("{name}: {} {line}\n", line.len() + 1)),
            "{name} in:\n{t}"
        );
    }
}

/// Programs that list a directory through a descriptor (`openat`, then
/// `fdopendir`, as `fts` does) see the store's files: `find` names them and
/// `cp -r` copies them out whole.
#[test]
fn find_and_cp_list_the_store_through_fdopendir() {
    let s = Setup::new("listing");
    let store = s.p("store");
    let mut c = s.preloaded(Path::new("/bin/sh"));
    c.arg("-c").arg(format!(
        "printf hello > {0}/h && printf world > {0}/k",
        store.display()
    ));
    run(c);
    let mut c = s.preloaded(Path::new("/usr/bin/find"));
    c.arg(&store).args(["-type", "f"]);
    let t = text(&run(c).stdout);
    let mut found: Vec<&str> = t.lines().collect();
    found.sort();
    let want = [
        format!("{}/h", store.display()),
        format!("{}/k", store.display()),
    ];
    assert_eq!(found, want, "find listed:\n{t}");
    let out = s.p("outside").join("copy");
    let mut c = s.preloaded(Path::new("/bin/cp"));
    c.arg("-r").arg(&store).arg(&out);
    run(c);
    assert_eq!(std::fs::read(out.join("h")).unwrap(), b"hello");
    assert_eq!(std::fs::read(out.join("k")).unwrap(), b"world");
}

/// Programs built against a C library before 2.33 call `__fxstat64` and
/// `__xstat64`: a store file is a regular file of the length written.
#[test]
fn the_stat_functions_of_older_c_libraries_see_store_files() {
    let s = Setup::new("old-stat");
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("old-stat");
    let t = text(&run(c).stdout);
    assert!(
        t.contains("__fxstat64                               0 1 10000"),
        "{t}"
    );
    assert!(
        t.contains("__xstat64                                0 1 10000"),
        "{t}"
    );
}

/// A child made by `vfork` that closes a store descriptor and execs (as a
/// subprocess module does) leaves the parent's descriptor and data alone.
#[test]
fn a_vfork_child_leaves_the_parents_store_alone() {
    let s = Setup::new("vfork");
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("vfork-exec");
    let t = text(&run(c).stdout);
    assert!(
        t.contains("child exit status                        0"),
        "{t}"
    );
    assert!(
        t.contains("pread v in the parent                    6"),
        "{t}"
    );
    assert!(
        t.contains("  bytes                                  parent"),
        "{t}"
    );
}

/// A write that only ends past the largest file writes the part before it
/// and returns that short count, and one from there on fails `EFBIG`, as
/// the kernel's: the same transcript as on a plain directory, each at its
/// own largest file (found by the probe with `ftruncate`). The store's
/// devices are on tmpfs, whose files reach the store's largest (ext4's stop
/// short of it).
#[test]
fn writes_ending_past_the_largest_file_are_cut_there() {
    let s = Setup::new("at-largest");
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("skipped: no /dev/shm for devices that hold the largest file");
        return;
    }
    let devs = shm.join(format!(
        "setcache-preload-at-largest-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&devs);
    std::fs::create_dir_all(&devs).unwrap();
    let prog = probe(&s.p("bin"), true);
    let mut plain = Command::new(&prog);
    plain.arg(s.p("plain")).arg("at-largest");
    let plain = text(&run(plain).stdout);
    assert!(plain.contains("pwrite 2 ending one past it"), "{plain}");
    let mut c = s.preloaded(&prog);
    c.env("SETCACHE_DEVICES", &devs)
        .arg(s.p("store"))
        .arg("at-largest");
    let out = run(c);
    let _ = std::fs::remove_dir_all(&devs);
    assert_eq!(text(&out.stdout), plain, "{}", text(&out.stderr));
}

/// Offsets and lengths past the largest file the store takes (2^52 bytes
/// with 4 KiB pages) get the kernel's answers past a file system's largest
/// file (ext4's, on the machines this runs on): `EFBIG` from a length or a
/// write there, `EINVAL` from `lseek`, and a write or copy of nothing there
/// as the kernel takes it. They were `EINVAL` from the cache's check, and
/// `lseek` there succeeded.
#[test]
fn offsets_past_the_largest_file_get_the_kernels_answers() {
    let s = Setup::new("largest");
    let prog = probe(&s.p("bin"), true);
    let mut c = s.preloaded(&prog);
    c.arg(s.p("store")).arg("largest");
    let t = text(&run(c).stdout);
    let want = [
        ("write lg", "10"),
        ("ftruncate 2^60", "-1 EFBIG"),
        ("truncate 2^60", "-1 EFBIG"),
        ("fallocate 1 at 2^60", "-1 EFBIG"),
        ("fallocate 2^60 at 0", "-1 EFBIG"),
        ("fallocate KEEP_SIZE 1 at 2^60", "-1 EFBIG"),
        ("fallocate PUNCH_HOLE 1 at 2^60", "-1 EFBIG"),
        ("lseek to 2^60", "-1 EINVAL"),
        ("lseek to the end + 2^60", "-1 EINVAL"),
        ("lseek to the largest offset", "-1 EINVAL"),
        ("pwrite 2 at 2^60", "-1 EFBIG"),
        ("pwrite 0 at 2^60", "0"),
        ("copy_file_range to 2^60", "-1 EFBIG"),
        ("copy_file_range 0 bytes to 2^60", "-1 EFBIG"),
        ("sync_file_range 5 from 2^60", "0"),
        ("lg's size", "10"),
        ("lg2's size", "0"),
    ];
    let got: Vec<(String, String)> = t
        .lines()
        .map(|l| {
            let (k, v) = l.split_at(l.len().min(41));
            (k.trim_end().to_string(), v.trim().to_string())
        })
        .collect();
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(got, want, "{t}");
}

/// The store's own descriptors (lock files, backing files, rings,
/// doorbells) leave the low numbers to the program, which counts on them:
/// a shell's `exec 3< file` reads the file, not a lock file the store opened
/// at 3; a program whose standard output is closed gets an error writing
/// to it, and its words go into none of the store's files.
#[test]
fn the_stores_own_descriptors_leave_the_low_numbers_to_the_program() {
    let s = Setup::new("low-fds");
    let src = s.p("outside").join("data");
    std::fs::write(&src, "first line\nsecond\n").unwrap();
    let sh = |script: &str| {
        let mut c = s.preloaded(Path::new("/bin/sh"));
        c.current_dir(s.p("store")).arg("-c").arg(script);
        c
    };
    run(sh(&format!("cp {} data", src.display())));
    let o = run(sh("exec 3< data; read x <&3; echo \"got: $x\""));
    assert_eq!(text(&o.stdout), "got: first line\n", "{}", text(&o.stderr));
    let o = sh("exec >&-; : < data; echo meant-for-stdout")
        .output()
        .unwrap();
    assert!(!o.status.success(), "a write to a closed stdout succeeded");
    for dev in ["dev0", "dev1"] {
        for e in std::fs::read_dir(s.p(dev)).unwrap().flatten() {
            let bytes = std::fs::read(e.path()).unwrap_or_default();
            assert!(
                !String::from_utf8_lossy(&bytes).contains("meant-for-stdout"),
                "the program's output went into {}",
                e.path().display()
            );
        }
    }
}
