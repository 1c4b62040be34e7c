//! `setcache cp`: a file of odd length copied into a store, within it and
//! back out arrives byte for byte; an existing destination is refused
//! without `--force`; bad arguments get a clear error and change nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!("setcache-cp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    for sub in ["d0", "d1"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    d
}

fn cp(d: &Path, args: &[&str]) -> Output {
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
    let _ = std::fs::remove_dir_all(&d);
}
