//! Copies into memory that the copying thread does not read again: pages
//! moved from the staging area to their frames.
//!
//! An ordinary copy reads each destination line into the processor's
//! caches before it overwrites it, so a page costs three passes over memory
//! (source, destination, write-back). Streaming stores write whole lines
//! without reading them: two passes, and the copying thread's caches keep
//! what it does use. Streaming stores are weakly ordered, so a thread that
//! streams pages calls [`fence`] before it publishes them.

/// Copy `src` into `dst` (the same length) with streaming stores where the
/// processor has them and the destination's alignment allows; an ordinary
/// copy otherwise. Call [`fence`] before another thread may read `dst`.
pub(crate) fn copy_streaming(dst: &mut [u8], src: &[u8]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "a streaming copy between unequal lengths"
    );
    #[cfg(target_arch = "x86_64")]
    if dst.len().is_multiple_of(64) && (dst.as_ptr() as usize).is_multiple_of(32) {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the processor has AVX2, which is all the function's
            // target feature asks beyond what it checks itself.
            unsafe { x86::stream_avx2(dst, src) };
        } else {
            x86::stream_sse2(dst, src);
        }
        return;
    }
    dst.copy_from_slice(src);
}

/// Order every streaming store this thread made before its later stores (a
/// page's publication among them).
pub(crate) fn fence() {
    #[cfg(target_arch = "x86_64")]
    x86::sfence();
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{
        __m128i, __m256i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128, _mm256_loadu_si256,
        _mm256_stream_si256,
    };

    /// The checks both copies rely on: equal lengths, a multiple of 64, and
    /// `dst` 32-byte aligned.
    fn check(dst: &[u8], src: &[u8]) {
        assert!(
            dst.len() == src.len()
                && dst.len().is_multiple_of(64)
                && (dst.as_ptr() as usize).is_multiple_of(32),
            "a streaming copy needs equal lengths in 64-byte lines and an aligned destination"
        );
    }

    /// Copy `src` to `dst` with 32-byte streaming stores. Callers make sure
    /// the processor has AVX2 (the target feature requires it of them).
    #[target_feature(enable = "avx2")]
    pub(super) fn stream_avx2(dst: &mut [u8], src: &[u8]) {
        check(dst, src);
        let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
        for i in (0..dst.len()).step_by(64) {
            // SAFETY: `i + 64 <= len`, inside both slices (checked above);
            // `d + i` is 32-byte aligned as `d` is and `i` a multiple of 64.
            unsafe {
                let a = _mm256_loadu_si256(s.add(i).cast::<__m256i>());
                let b = _mm256_loadu_si256(s.add(i + 32).cast::<__m256i>());
                _mm256_stream_si256(d.add(i).cast::<__m256i>(), a);
                _mm256_stream_si256(d.add(i + 32).cast::<__m256i>(), b);
            }
        }
    }

    /// Copy `src` to `dst` with 16-byte streaming stores (SSE2, which every
    /// x86-64 processor has).
    pub(super) fn stream_sse2(dst: &mut [u8], src: &[u8]) {
        check(dst, src);
        let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
        for i in (0..dst.len()).step_by(16) {
            // SAFETY: `i + 16 <= len`, inside both slices (checked above);
            // `d + i` is 16-byte aligned as `d` is and `i` a multiple of 16.
            unsafe {
                let v = _mm_loadu_si128(s.add(i).cast::<__m128i>());
                _mm_stream_si128(d.add(i).cast::<__m128i>(), v);
            }
        }
    }

    pub(super) fn sfence() {
        // SAFETY: SSE is part of every x86-64 processor.
        unsafe { _mm_sfence() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_copies_equal_ordinary_ones() {
        let src: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i * 7 + 3) as u8).collect();
        let mut buf = vec![0u8; 5 * 4096];
        let off = buf.as_ptr().align_offset(4096);
        let dst = &mut buf[off..off + 3 * 4096 + 100];
        // Whole pages (streamed), a short tail, and a misaligned start.
        copy_streaming(&mut dst[..4096], &src[..4096]);
        copy_streaming(&mut dst[4096..8192], &src[4096..8192]);
        copy_streaming(&mut dst[8192..], &src[8192..]);
        fence();
        assert_eq!(&dst[..], &src[..]);
        copy_streaming(&mut dst[1..129], &src[..128]);
        assert_eq!(&dst[1..129], &src[..128]);
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn both_streaming_forms_copy_every_byte() {
        let src: Vec<u8> = (0..8192).map(|i| (i * 13 + 1) as u8).collect();
        let mut buf = vec![0u8; 4 * 4096];
        let off = buf.as_ptr().align_offset(4096);
        let dst = &mut buf[off..off + 8192];
        x86::stream_sse2(dst, &src);
        x86::sfence();
        assert_eq!(&dst[..], &src[..]);
        dst.fill(0);
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the processor has AVX2.
            unsafe { x86::stream_avx2(dst, &src) };
            x86::sfence();
            assert_eq!(&dst[..], &src[..]);
        }
    }
}
