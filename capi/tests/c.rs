//! The C interface from C: `examples/c/example.c`, `tests/errors.c` (every
//! call's error paths) and `tests/stress.c` (many threads on the same
//! pages), compiled with the system's C compiler against the shared and the
//! static library that cargo built for this test, and run; and from C++, a
//! callback that throws (`tests/throws.cpp`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Where cargo put the libraries for this test: beside it, in target/<profile>/deps.
fn deps() -> PathBuf {
    std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf()
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("setcache-capi-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    for sub in ["d0", "d1"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    d
}

/// Compile `src` against the library: shared (with an rpath) or static.
fn compile(src: &Path, out: &Path, shared: bool) {
    let deps = deps();
    let mut cc = Command::new("cc");
    cc.args(["-O1", "-Wall", "-Wextra", "-Werror", "-std=c11"])
        .arg("-I")
        .arg(root().join("include"))
        .arg(src)
        .arg("-o")
        .arg(out);
    if shared {
        assert!(deps.join("libsetcache_c.so").exists());
        cc.arg(format!("-L{}", deps.display()))
            .arg("-lsetcache_c")
            .arg(format!("-Wl,-rpath,{}", deps.display()))
            .arg("-lpthread");
    } else {
        cc.arg(deps.join("libsetcache_c.a"))
            .args(["-lpthread", "-ldl", "-lm"]);
    }
    let st = cc.status().expect("run cc");
    assert!(st.success(), "cc failed on {}", src.display());
}

fn run(prog: &Path, dir: &Path) -> String {
    // Cargo's LD_LIBRARY_PATH names target/<profile> first, where a library
    // of an earlier `cargo build` may lie: this test's own comes first.
    let out = Command::new(prog)
        .env("LD_LIBRARY_PATH", deps())
        .arg(dir.join("d0"))
        .arg(dir.join("d1"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{} failed:\n{text}\n{}",
        prog.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn the_example_runs_on_the_shared_and_the_static_library() {
    for shared in [true, false] {
        let d = scratch(if shared { "example-so" } else { "example-a" });
        let prog = d.join("example");
        compile(&root().join("examples/c/example.c"), &prog, shared);
        let out = run(&prog, &d);
        assert!(out.contains("read back: hello from C"), "{out}");
        assert!(out.contains("length: 10051"), "{out}");
        assert!(out.contains("queue: 8 reads done"), "{out}");
        assert!(
            out.contains("pinned page: 1859 bytes; at 10000: hello"),
            "{out}"
        );
        assert!(out.contains("file greetings"), "{out}");
        let _ = std::fs::remove_dir_all(&d);
    }
}

#[test]
fn every_call_reports_its_errors() {
    let d = scratch("errors");
    let prog = d.join("errors");
    compile(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/errors.c"),
        &prog,
        true,
    );
    let out = run(&prog, &d);
    assert!(out.ends_with("0 failures\n"), "{out}");
    assert!(
        out.lines().filter(|l| l.starts_with("ok ")).count() >= 50,
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// `prog DEVICE_DIR_0 DEVICE_DIR_1 mode`, ended by SIGKILL after 60 s:
/// whether it ended by itself with status 0, and its output and errors.
fn run_mode(prog: &Path, dir: &Path, mode: &str) -> (bool, String, String) {
    run_args(prog, dir, &[mode], std::time::Duration::from_secs(60))
}

/// `prog DEVICE_DIR_0 DEVICE_DIR_1 args...`, ended by SIGKILL after
/// `limit`: whether it ended by itself with status 0, and its output and
/// errors.
fn run_args(
    prog: &Path,
    dir: &Path,
    args: &[&str],
    limit: std::time::Duration,
) -> (bool, String, String) {
    use std::process::Stdio;
    let mut child = Command::new(prog)
        .env("LD_LIBRARY_PATH", deps())
        .arg(dir.join("d0"))
        .arg(dir.join("d1"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    let ended = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.success();
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            break false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    (
        ended,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Many threads on the same pages of one file through the C interface
/// (`tests/stress.c`: queued reads and writes, `setcache_pread` and
/// `setcache_pwrite`, shared and mutable pins, a sync every 20 ms): no page
/// read torn or another page's, each thread's own pages read back as it
/// last wrote them (during the run and after a reopen), no request failed,
/// none waited 5 s. `SETCACHE_STRESS_SECS` and `SETCACHE_STRESS_THREADS`
/// make it longer and wider, as for the crate's stress tests;
/// `SETCACHE_TEST_PARTITIONS` divides the cache's sets.
#[test]
fn many_threads_through_the_c_interface_lose_nothing_and_never_stall() {
    let d = scratch("stress");
    let prog = d.join("stress");
    compile(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stress.c"),
        &prog,
        true,
    );
    let var = |name: &str, default: &str| std::env::var(name).unwrap_or(default.to_string());
    let secs = var("SETCACHE_STRESS_SECS", "3");
    let threads = var("SETCACHE_STRESS_THREADS", "32");
    let partitions = var("SETCACHE_TEST_PARTITIONS", "0");
    let limit = std::time::Duration::from_secs(secs.parse::<u64>().unwrap() + 120);
    let (ended, out, err) = run_args(&prog, &d, &[&secs, &threads, &partitions], limit);
    assert!(ended && out.starts_with("ok "), "{out}\n{err}");
    eprint!("{out}");
    let _ = std::fs::remove_dir_all(&d);
}

/// A program that ends without closing its store keeps what it wrote: by
/// `exit`, by returning from `main`, and by its main thread's
/// `pthread_exit` (which ends the process with its last thread, not never);
/// an exit beside a page another thread pins for writing for good does not
/// wait for it; threads cancelled while they write and sync through the
/// library are cancelled outside it, and the program goes on. On the shared
/// and the static library.
#[test]
fn a_program_that_ends_without_closing_its_store_keeps_what_it_wrote() {
    for shared in [true, false] {
        let d = scratch(if shared { "exits-so" } else { "exits-a" });
        let prog = d.join("exits");
        compile(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/exits.c"),
            &prog,
            shared,
        );
        for mode in ["exit", "return", "pthread_exit", "pinned", "fork", "cancel"] {
            for sub in ["d0", "d1"] {
                let _ = std::fs::remove_dir_all(d.join(sub));
                std::fs::create_dir_all(d.join(sub)).unwrap();
            }
            let (ended, out, err) = run_mode(&prog, &d, mode);
            assert!(
                ended,
                "{mode} (shared {shared}): did not end by itself\n{out}\n{err}"
            );
            let (ok, check, err2) = run_mode(&prog, &d, "check");
            assert!(ok, "check after {mode}: {check}\n{err2}");
            assert!(
                check.contains("kept: 22 [written before the end]"),
                "{mode} (shared {shared}): {check}\n{err}"
            );
            if mode == "fork" {
                assert!(
                    check.contains("status: 14 [child exited 7]"),
                    "{check}\n{err}"
                );
            }
            if mode == "cancel" {
                assert!(
                    check.contains("status: 12 [cancelled 40]"),
                    "{check}\n{err}"
                );
            }
            if mode == "pthread_exit" {
                assert!(
                    check.contains("late: 24 [written after main ended]"),
                    "{check}\n{err}"
                );
            }
        }
        let _ = std::fs::remove_dir_all(&d);
    }
}

/// A C++ exception thrown by `setcache_list`'s callback ends the process
/// with SIGABRT at the library's catch: it neither runs on through the
/// library's frames to the program's `catch` nor returns.
#[test]
fn an_exception_through_a_callback_ends_the_process() {
    use std::os::unix::process::ExitStatusExt;
    let d = scratch("throws");
    let prog = d.join("throws");
    let deps = deps();
    let st = Command::new("c++")
        .args(["-O1", "-Wall", "-Wextra", "-Werror", "-std=c++17"])
        .arg("-I")
        .arg(root().join("include"))
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/throws.cpp"))
        .arg("-o")
        .arg(&prog)
        .arg(format!("-L{}", deps.display()))
        .arg("-lsetcache_c")
        .arg(format!("-Wl,-rpath,{}", deps.display()))
        .status()
        .expect("run c++");
    assert!(st.success(), "c++ failed");
    let out = Command::new(&prog)
        .env("LD_LIBRARY_PATH", &deps)
        .arg(d.join("d0"))
        .arg(d.join("d1"))
        .output()
        .unwrap();
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(o.contains("listing"), "{o}\n{e}");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "not ended by SIGABRT: {:?}\n{o}\n{e}",
        out.status
    );
    let _ = std::fs::remove_dir_all(&d);
}
