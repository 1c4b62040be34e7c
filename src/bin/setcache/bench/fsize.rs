//! The file-size limit (`ulimit -f`, `RLIMIT_FSIZE`). A write past it raises
//! SIGXFSZ, whose default action kills the process without a word; `main`
//! ignores the signal, so such a write fails with EFBIG instead, and the
//! messages of those failures say which limit was hit.

use std::path::PathBuf;

/// Ignore SIGXFSZ, so that writes past the file-size limit fail with EFBIG
/// (and are reported) instead of killing the process. The disposition holds
/// in every thread, and in the bench's child processes (an ignored signal
/// stays ignored across `exec`).
pub(crate) fn ignore_sigxfsz() {
    // SAFETY: SIG_IGN installs no handler; nothing else in the process
    // depends on SIGXFSZ.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// The soft file-size limit in bytes, or `None` when there is none.
pub(crate) fn limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut r) };
    (rc == 0 && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// Whether `msg` reports an EFBIG ("File too large") error.
pub(crate) fn is_efbig(msg: &str) -> bool {
    msg.contains(&std::io::Error::from_raw_os_error(libc::EFBIG).to_string())
}

/// `msg`, followed, when it reports EFBIG, by what the limit is and what to
/// do; `files` are the files that grew (named in the note when given).
pub(crate) fn explain(msg: String, files: &[PathBuf]) -> String {
    if !is_efbig(&msg) {
        return msg;
    }
    let (named, smaller) = if files.is_empty() {
        (String::new(), "")
    } else {
        let list: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
        (
            format!(" of {}", list.join(", ")),
            " or choose a smaller --file-size",
        )
    };
    match limit() {
        Some(l) => format!(
            "{msg} (writes{named} past the file-size limit of {l} bytes fail: \
             raise it with `ulimit -f`{smaller})"
        ),
        None => format!("{msg} (the file system refused to grow the file{named} that far)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn efbig_messages_get_a_note_and_others_do_not() {
        let efbig = std::io::Error::from_raw_os_error(libc::EFBIG);
        let msg = format!("prefill: write of /x/dev0/bench: {efbig}");
        let out = explain(msg.clone(), &[PathBuf::from("/x/dev0/bench")]);
        assert!(out.starts_with(&msg) && out.len() > msg.len(), "{out}");
        assert!(out.contains("/x/dev0/bench"), "{out}");
        if let Some(l) = limit() {
            assert!(
                out.contains(&l.to_string()) && out.contains("ulimit -f"),
                "{out}"
            );
        }
        let other = std::io::Error::from_raw_os_error(libc::ENOSPC).to_string();
        assert_eq!(explain(other.clone(), &[]), other);
    }
}
