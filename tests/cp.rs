//! `setcache cp`: a file of odd length copied into a store, within it and
//! back out arrives byte for byte; an existing destination is refused
//! without `--force`; bad arguments get a clear error and change nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scratch() -> PathBuf {
    scratch_named("main")
}

/// A fresh directory of its own for one test, with device directories `d0`
/// and `d1` (tests run at once).
fn scratch_named(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("setcache-cp-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    for sub in ["d0", "d1"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    d
}

fn cp<S: AsRef<std::ffi::OsStr>>(d: &Path, args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_setcache"))
        .arg("cp")
        .arg("--devices")
        .arg(format!(
            "{},{}",
            d.join("d0").display(),
            d.join("d1").display()
        ))
        .args(args)
        .output()
        .unwrap()
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn refused(o: &Output, words: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains(words), "{err}");
}

#[test]
fn files_go_in_and_out_byte_for_byte() {
    let d = scratch();
    let data: Vec<u8> = (0..3_000_017u64)
        .map(|i| ((i * 2_654_435_761) >> 13) as u8)
        .collect();
    let src = d.join("in.bin");
    std::fs::write(&src, &data).unwrap();
    let s = src.to_str().unwrap();
    let out = d.join("out.bin");
    let o = out.to_str().unwrap();
    ok(&cp(&d, &[s, "store:a"]));
    ok(&cp(&d, &["store:a", "store:b"]));
    ok(&cp(&d, &["store:b", o]));
    assert!(std::fs::read(&out).unwrap() == data, "the copy differs");

    refused(&cp(&d, &[s, "store:a"]), "exists (give --force");
    refused(&cp(&d, &["store:a", o]), "exists (give --force");
    std::fs::write(&src, b"short").unwrap();
    ok(&cp(&d, &["--force", s, "store:a"]));
    ok(&cp(&d, &["--force", "store:a", o]));
    assert_eq!(std::fs::read(&out).unwrap(), b"short");

    refused(&cp(&d, &["store:missing", o]), "not found");
    refused(&cp(&d, &[s, o]), "must be a file of the store");
    refused(
        &cp(&d, &["store:a", "store:a"]),
        "both source and destination",
    );
    refused(
        &cp(&d, &[d.join("no-such").to_str().unwrap(), "store:c"]),
        "cannot open",
    );
    // A name of 199 bytes (the store takes up to 200): its copy's temporary
    // name stays within the limit too; 201 bytes are refused by that name.
    let long = format!("store:{}", "n".repeat(199));
    ok(&cp(&d, &[s, &long]));
    ok(&cp(&d, &[&long, "--force", o]));
    assert_eq!(std::fs::read(&out).unwrap(), b"short");
    refused(
        &cp(&d, &[s, &format!("store:{}", "n".repeat(201))]),
        &"n".repeat(201),
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// What a copy out of the store must not destroy: its own source (a backing
/// file of the store file as destination), and, with `--force`, the old
/// destination when the copy stops part way (Ctrl-C here).
#[test]
fn a_copy_out_never_destroys_its_source_or_an_old_destination() {
    let d = std::env::temp_dir().join(format!("setcache-cp-keep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    for sub in ["d0", "d1"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    let data: Vec<u8> = (0..(96u64 << 20)).map(|i| (i % 251) as u8).collect();
    let src = d.join("in.bin");
    std::fs::write(&src, &data).unwrap();
    ok(&cp(&d, &[src.to_str().unwrap(), "store:a"]));
    // Onto one of its own backing files.
    let backing = d.join("d0").join("a.scf");
    assert!(
        backing.exists(),
        "the store file's backing file is named a.scf"
    );
    refused(
        &cp(&d, &["--force", "store:a", backing.to_str().unwrap()]),
        "backing file of store:a",
    );
    // Nor the other way: the store file the copy replaces is its source.
    refused(
        &cp(&d, &["--force", backing.to_str().unwrap(), "store:a"]),
        "backing file of store:a",
    );
    let back = d.join("back.bin");
    ok(&cp(&d, &["store:a", back.to_str().unwrap()]));
    assert!(std::fs::read(&back).unwrap() == data, "store:a was damaged");
    // Stopped part way: the old destination stays as it was, no temporary.
    // (A copy that ended before the signal came, this thread let go too
    // long on a loaded machine, is tried again.)
    let old = d.join("old.bin");
    let temporary = || {
        std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(".old.bin.cp-"))
    };
    for attempt in 0.. {
        std::fs::write(&old, b"the old bytes").unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_setcache"))
            .args(["cp", "--devices"])
            .arg(format!(
                "{},{}",
                d.join("d0").display(),
                d.join("d1").display()
            ))
            .args(["--force", "store:a", old.to_str().unwrap()])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let t = std::time::Instant::now();
        let mut ended = false;
        while !temporary() {
            if child.try_wait().unwrap().is_some() {
                ended = true;
                break;
            }
            assert!(t.elapsed().as_secs() < 60, "no temporary file after 60 s");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        if !ended {
            // SAFETY: plain system call on our child, not yet reaped.
            assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
        }
        let o = child.wait_with_output().unwrap();
        if ended || o.status.success() {
            ok(&o);
            assert!(std::fs::read(&old).unwrap() == data, "a whole copy");
            assert!(attempt < 3, "the copy ended before it was stopped, 4 times");
            continue;
        }
        refused(&o, "interrupted");
        assert_eq!(std::fs::read(&old).unwrap(), b"the old bytes");
        assert!(!temporary(), "the temporary file stayed");
        break;
    }
    // A directory that was no store keeps no lock file after a failed copy.
    let fresh = d.join("fresh");
    std::fs::create_dir_all(&fresh).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_setcache"))
        .args(["cp", "--devices", fresh.to_str().unwrap(), "store:none"])
        .arg(d.join("none.bin"))
        .output()
        .unwrap();
    refused(&o, "not found");
    assert!(
        !fresh.join(".setcache-lock").exists(),
        "a lock file was left"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// A copy out into a device directory of the store is refused, over another
/// store file's backing file (with `--force`) or under a new name, and the
/// other file stays whole; a copy out to standard output on a pipe, to
/// `/dev/null` (without `--force`: nothing is replaced) and under a name
/// near the longest a directory takes arrives whole.
#[test]
fn a_copy_out_into_a_device_directory_is_refused_and_odd_destinations_work() {
    let d = scratch_named("devdir");
    let a: Vec<u8> = (0..1_000_003u64).map(|i| (i % 249) as u8).collect();
    let b: Vec<u8> = (0..300_001u64).map(|i| (i % 241) as u8).collect();
    for (name, data) in [("a", &a), ("b", &b)] {
        let src = d.join(format!("{name}.in"));
        std::fs::write(&src, data).unwrap();
        ok(&cp(&d, &[src.to_str().unwrap(), &format!("store:{name}")]));
    }
    let other = d.join("d1").join("b.scf");
    assert!(other.exists(), "store:b's backing file is named b.scf");
    refused(
        &cp(&d, &["--force", "store:a", other.to_str().unwrap()]),
        "inside the store's device directory",
    );
    let new = d.join("d0").join("new.scf");
    refused(
        &cp(&d, &["store:a", new.to_str().unwrap()]),
        "inside the store's device directory",
    );
    assert!(!new.exists(), "a file was made in a device directory");
    // A directory below one is no device directory.
    let below = d.join("d0").join("backup");
    std::fs::create_dir_all(&below).unwrap();
    ok(&cp(&d, &["store:a", below.join("a.scf").to_str().unwrap()]));
    let back = d.join("b.out");
    ok(&cp(&d, &["store:b", back.to_str().unwrap()]));
    assert!(std::fs::read(&back).unwrap() == b, "store:b was damaged");
    // Standard output on a pipe (`output` reads it through one).
    let o = cp(&d, &["store:a", "/dev/stdout"]);
    ok(&o);
    assert!(o.stdout == a, "{} bytes on the pipe", o.stdout.len());
    ok(&cp(&d, &["store:a", "/dev/null"]));
    let long = d.join("x".repeat(250));
    ok(&cp(&d, &["store:a", long.to_str().unwrap()]));
    assert!(std::fs::read(&long).unwrap() == a);
    let _ = std::fs::remove_dir_all(&d);
}

/// A sparse file copied into the store and back out keeps its holes (the
/// backing files and the copy out take about the bytes written, not the
/// length) and arrives byte for byte.
#[test]
fn holes_stay_holes_both_ways() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let d = scratch_named("holes");
    let src = d.join("sparse.in");
    let f = std::fs::File::create(&src).unwrap();
    let len = 40u64 << 20;
    f.set_len(len).unwrap();
    for at in [0, 10 << 20, (20 << 20) + 4096 + 17, len - 100] {
        f.write_all_at(&[0xA5; 100], at).unwrap();
    }
    drop(f);
    ok(&cp(&d, &[src.to_str().unwrap(), "store:s"]));
    let used = |p: &Path| std::fs::metadata(p).unwrap().blocks() * 512;
    let backing: u64 = ["d0", "d1"]
        .iter()
        .map(|dev| used(&d.join(dev).join("s.scf")))
        .sum();
    assert!(backing < 4 << 20, "the store's copy takes {backing} bytes");
    let out = d.join("sparse.out");
    ok(&cp(&d, &["store:s", out.to_str().unwrap()]));
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&src).unwrap());
    assert!(
        used(&out) < 4 << 20,
        "the copy out takes {} bytes",
        used(&out)
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// A copy waiting on a source that sends nothing (a FIFO nobody writes):
/// the first Ctrl-C cannot end the wait, a second ends the process.
#[test]
fn a_second_ctrl_c_ends_a_copy_waiting_on_its_source() {
    let d = std::env::temp_dir().join(format!("setcache-cp-fifo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("d0")).unwrap();
    let fifo = d.join("in.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    let r = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
    assert_eq!(r, 0);
    let mut child = Command::new(env!("CARGO_BIN_EXE_setcache"))
        .args(["cp", "--devices", d.join("d0").to_str().unwrap()])
        .args([fifo.to_str().unwrap(), "store:x"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    // Once the copy catches Ctrl-C (before, the first would end it as the
    // default does); the second sent once the first was taken (two pending
    // at once are one).
    let status_has = |field: &str| -> bool {
        let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .is_some_and(|mask| mask & (1 << (libc::SIGINT - 1)) != 0)
    };
    let until = |what: &str, done: &dyn Fn() -> bool| {
        let t = std::time::Instant::now();
        while !done() {
            assert!(t.elapsed().as_secs() < 20, "{what} after 20 s");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    };
    until("Ctrl-C not caught", &|| status_has("SigCgt:"));
    for _ in 0..2 {
        // SAFETY: plain system call on our child, not yet reaped.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
        until("Ctrl-C still pending", &|| {
            !status_has("ShdPnd:") && !status_has("SigPnd:")
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let t = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed().as_secs() >= 10 {
            let _ = child.kill();
            panic!("the copy still waited 10 s after two Ctrl-Cs");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(!status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&d);
}

/// A copy from a pipe whose writer sends nothing (a FIFO held open, idle):
/// one SIGTERM (as `kill` or `timeout` send) ends it cleanly, with no file
/// made in the store and no temporary file left behind.
#[test]
fn one_sigterm_ends_a_copy_waiting_on_an_idle_pipe() {
    let d = std::env::temp_dir().join(format!("setcache-cp-idle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("d0")).unwrap();
    let fifo = d.join("in.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let mut child = Command::new(env!("CARGO_BIN_EXE_setcache"))
        .args(["cp", "--devices", d.join("d0").to_str().unwrap()])
        .args([fifo.to_str().unwrap(), "store:x"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The writer's end, held open and idle: the copy's open returns, and its
    // reads then wait.
    let writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    let temporary = || {
        std::fs::read_dir(d.join("d0"))
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().contains(".cp-"))
    };
    let t = std::time::Instant::now();
    while !temporary() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the copy ended unasked"
        );
        assert!(t.elapsed().as_secs() < 60, "no temporary file after 60 s");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    // SAFETY: plain system call on our child, not yet reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let t = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed().as_secs() >= 10 {
            let _ = child.kill();
            panic!("the copy still waited on its pipe 10 s after SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    refused(&o, "interrupted");
    assert!(!temporary(), "the temporary file stayed");
    drop(writer);
    let _ = std::fs::remove_dir_all(&d);
}

/// A copy from a FIFO no writer has opened, or into one no reader has
/// opened, waits in no `open` that a signal's handler cannot end: one Ctrl-C
/// ends it with "interrupted" (it waited for ever, Ctrl-C or not, with the
/// store's devices locked).
#[test]
fn one_ctrl_c_ends_a_copy_waiting_for_a_fifos_other_end() {
    let d = scratch_named("fifo-ends").join("files");
    std::fs::create_dir_all(&d).unwrap();
    let fifo = d.join("f.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let base = d.parent().unwrap().to_path_buf();
    let plain = d.join("a.txt");
    std::fs::write(&plain, b"some bytes").unwrap();
    ok(&cp(&base, &[plain.to_str().unwrap(), "store:a"]));
    let f = fifo.to_str().unwrap();
    for args in [[f, "store:x", ""], ["--force", "store:a", f]] {
        let args: Vec<&str> = args.into_iter().filter(|a| !a.is_empty()).collect();
        let mut child = Command::new(env!("CARGO_BIN_EXE_setcache"))
            .arg("cp")
            .arg("--devices")
            .arg(format!(
                "{},{}",
                base.join("d0").display(),
                base.join("d1").display()
            ))
            .args(&args)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let caught = || {
            let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            text.lines()
                .find_map(|l| l.strip_prefix("SigCgt:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                .is_some_and(|mask| mask & (1 << (libc::SIGINT - 1)) != 0)
        };
        let t = std::time::Instant::now();
        while !caught() {
            assert!(
                t.elapsed().as_secs() < 20,
                "{args:?}: Ctrl-C not caught after 20 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Waiting for the other end by now.
        std::thread::sleep(std::time::Duration::from_millis(300));
        // SAFETY: plain system call on our child, not yet reaped.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
        let t = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() {
            if t.elapsed().as_secs() >= 10 {
                let _ = child.kill();
                panic!("{args:?}: the copy still waited 10 s after one Ctrl-C");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        refused(&child.wait_with_output().unwrap(), "interrupted");
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// A forced copy out over a file keeps that file's mode (it took the
/// umask's, opening a private file to everyone); over a symbolic link it
/// writes the file the link names and leaves the link; a link to nothing is
/// refused, as cp(1) refuses it.
#[test]
fn a_forced_copy_out_keeps_the_files_mode_and_writes_through_a_link() {
    use std::os::unix::fs::PermissionsExt;
    let base = scratch_named("modes");
    let d = base.join("files");
    std::fs::create_dir_all(&d).unwrap();
    let src = d.join("src.txt");
    std::fs::write(&src, b"new contents").unwrap();
    ok(&cp(&base, &[src.to_str().unwrap(), "store:a"]));
    let private = d.join("private.bin");
    std::fs::write(&private, b"old").unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    ok(&cp(
        &base,
        &["--force", "store:a", private.to_str().unwrap()],
    ));
    let mode = std::fs::metadata(&private).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the mode of the file replaced");
    assert_eq!(std::fs::read(&private).unwrap(), b"new contents");

    let target = d.join("target.txt");
    std::fs::write(&target, b"old").unwrap();
    let link = d.join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    ok(&cp(&base, &["--force", "store:a", link.to_str().unwrap()]));
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"new contents");

    let dangling = d.join("dangling");
    std::os::unix::fs::symlink(d.join("nowhere"), &dangling).unwrap();
    refused(
        &cp(&base, &["--force", "store:a", dangling.to_str().unwrap()]),
        "symbolic link to no file",
    );
    assert!(!d.join("nowhere").exists());
    let _ = std::fs::remove_dir_all(&base);
}

/// Plain paths are the system's bytes, UTF-8 or not: a file whose name is
/// not UTF-8 goes in and comes back out under another such name. A store
/// name that is not UTF-8 is refused by what is wrong with it.
#[test]
fn plain_paths_that_are_not_utf8_are_copied() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let d = scratch_named("bytes");
    let src = d.join(OsStr::from_bytes(b"caf\xe9-in.bin"));
    let out = d.join(OsStr::from_bytes(b"caf\xe9-out.bin"));
    let data: Vec<u8> = (0..70_001u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    let run = |args: &[&OsStr]| cp(&d, args);
    ok(&run(&[src.as_os_str(), OsStr::new("store:cafe")]));
    ok(&run(&[OsStr::new("store:cafe"), out.as_os_str()]));
    assert!(std::fs::read(&out).unwrap() == data, "the copy differs");
    refused(
        &run(&[src.as_os_str(), OsStr::from_bytes(b"store:caf\xe9")]),
        "is not UTF-8",
    );
    let _ = std::fs::remove_dir_all(&d);
}
