//! The process a value was made in.
//!
//! A child made by `fork` inherits a copy of its parent's memory, with every
//! value in it, but none of its threads. A value whose engine threads, rings,
//! event descriptors or pending metadata steps belong to the parent must not
//! act on them when the child drops its copy: joining a thread the child does
//! not have panics, and reaping a ring the two processes share takes the
//! parent's completions. Such values keep an [`Origin`] and ask it on drop.

/// The process that made a value (its process id at the making).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Origin(u32);

impl Origin {
    /// The calling process.
    pub(crate) fn here() -> Origin {
        Origin(std::process::id())
    }

    /// Whether the calling process is the one that made the value (false in
    /// a child made by `fork` since).
    pub(crate) fn is_here(self) -> bool {
        self.0 == std::process::id()
    }
}

#[cfg(test)]
mod tests {
    use super::Origin;

    #[test]
    fn an_origin_is_here_in_its_process_and_not_in_a_forked_child() {
        let o = Origin::here();
        assert!(o.is_here());
        // SAFETY: the child only compares two numbers and exits at once.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let code = if o.is_here() { 1 } else { 0 };
            // SAFETY: ends the child without running the parent's handlers.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child made above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "child status {status:#x}");
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "the child saw its parent's origin as its own"
        );
    }
}
