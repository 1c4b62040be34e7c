//! Reading a `.bz2` file of one or more bzip2 streams, one after another.
//!
//! Parallel compressors (pbzip2, lbzip2) write a file as many streams, each
//! with its own header, as `bzip2` itself does for concatenated files. The
//! decoder in use reads one stream and takes the bytes after it into its
//! buffer, so each stream is handed to a decoder of its own, cut where the
//! next stream's header begins: `BZh`, a level digit, then the magic of a
//! block or of the end of an empty stream. (Those ten bytes could appear
//! inside compressed data by chance, about once in 2^80 positions; a stream
//! cut there fails to decode, with an error.)

use std::cell::RefCell;
use std::io::{self, Read};
use std::rc::Rc;

use bzip2_rs::DecoderReader;

/// Bytes of a stream header the cut looks for.
const HEADER: usize = 10;
/// The most bytes one read hands out (the decoder asks for 1 KiB at a time).
const STEP: usize = 1024;
/// Bytes `Streams::fill` keeps ahead: a header that starts within a read's
/// `STEP` bytes lies whole in them.
const AHEAD: usize = 4096;
const _: () = assert!(STEP + HEADER <= AHEAD);
const BLOCK_MAGIC: [u8; 6] = [0x31, 0x41, 0x59, 0x26, 0x53, 0x59];
const END_MAGIC: [u8; 6] = [0x17, 0x72, 0x45, 0x38, 0x50, 0x90];

fn is_header(b: &[u8]) -> bool {
    b.len() >= HEADER
        && b[..3] == *b"BZh"
        && (b'1'..=b'9').contains(&b[3])
        && (b[4..10] == BLOCK_MAGIC || b[4..10] == END_MAGIC)
}

/// The compressed bytes, handed out one stream at a time: a read returns 0
/// at the next stream's header until [`Streams::next_stream`].
struct Streams<R> {
    inner: R,
    buf: Vec<u8>,
    /// `buf[at..]` is not handed out yet.
    at: usize,
    eof: bool,
    /// Bytes handed out of the current stream (a header at its start is its
    /// own, not the next one's).
    given: u64,
    /// The last bytes handed out of the current stream (up to `TAIL`), where
    /// its end marker lies once the decoder has read it.
    tail: Vec<u8>,
}

/// Bytes of a stream's last reads kept: the end marker and what follows it
/// lie in the decoder's last read (at most `STEP` bytes) or straddle the one
/// before.
const TAIL: usize = 2 * STEP + HEADER;

/// Where the stream whose last bytes are `tail` ends: the byte after its end
/// marker (48 bits, at any bit offset), its 32-bit checksum and the padding
/// to a whole byte, found from the end; `None` if no marker is there.
fn stream_end(tail: &[u8]) -> Option<usize> {
    let magic = END_MAGIC.iter().fold(0u64, |m, &b| m << 8 | u64::from(b));
    let bits = tail.len() * 8;
    let bit = |i: usize| u64::from(tail[i / 8] >> (7 - i % 8) & 1);
    (0..bits.checked_sub(48 + 32)? + 1).rev().find_map(|start| {
        let found = (start..start + 48).fold(0u64, |m, i| m << 1 | bit(i));
        (found == magic).then(|| (start + 48 + 32).div_ceil(8))
    })
}

impl<R: Read> Streams<R> {
    /// Keep at least `HEADER` bytes ahead, unless the input ends first.
    fn fill(&mut self) -> io::Result<()> {
        while !self.eof && self.buf.len() - self.at < AHEAD {
            self.buf.drain(..self.at);
            self.at = 0;
            let old = self.buf.len();
            self.buf.resize(old + (64 << 10), 0);
            let n = self.inner.read(&mut self.buf[old..])?;
            self.buf.truncate(old + n);
            if n == 0 {
                self.eof = true;
            }
        }
        Ok(())
    }

    /// Start the next stream; false when the input has ended. The stream
    /// before must end where the bytes handed out of it end: bytes after its
    /// end marker that the decoder took with it (up to a read's worth) are
    /// not another stream.
    fn next_stream(&mut self) -> io::Result<bool> {
        if let Some(end) = stream_end(&self.tail)
            && end < self.tail.len()
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} bytes after the end of a bzip2 stream that are not another stream",
                    self.tail.len() - end
                ),
            ));
        }
        self.tail.clear();
        self.fill()?;
        if self.at == self.buf.len() {
            return Ok(false);
        }
        if !is_header(&self.buf[self.at..]) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "bytes after the end of a bzip2 stream that are not another stream",
            ));
        }
        self.given = 0;
        Ok(true)
    }
}

impl<R: Read> Read for Streams<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        self.fill()?;
        let avail = &self.buf[self.at..];
        // At most `STEP` bytes a read, so that a header starting among them
        // lies whole in the look-ahead `fill` keeps (unless the input ends).
        let want = out.len().min(STEP).min(avail.len());
        // Up to the next stream's header (not one at this stream's start).
        let skip = usize::from(self.given == 0);
        let n = (skip..want)
            .find(|&i| avail[i] == b'B' && is_header(&avail[i..]))
            .unwrap_or(want);
        out[..n].copy_from_slice(&avail[..n]);
        self.tail.extend_from_slice(&avail[..n]);
        if self.tail.len() > TAIL {
            self.tail.drain(..self.tail.len() - TAIL);
        }
        self.at += n;
        self.given += n as u64;
        Ok(n)
    }
}

/// A `Read` over the shared stream cutter, for one decoder.
struct Shared<R>(Rc<RefCell<Streams<R>>>);

impl<R: Read> Read for Shared<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        self.0.borrow_mut().read(out)
    }
}

/// The decompressed bytes of every stream of a `.bz2` input, in order.
pub(super) struct MultiBz2<R> {
    streams: Rc<RefCell<Streams<R>>>,
    dec: DecoderReader<Shared<R>>,
}

impl<R: Read> MultiBz2<R> {
    pub(super) fn new(inner: R) -> MultiBz2<R> {
        let streams = Rc::new(RefCell::new(Streams {
            inner,
            buf: Vec::new(),
            at: 0,
            eof: false,
            given: 0,
            tail: Vec::new(),
        }));
        let dec = DecoderReader::new(Shared(streams.clone()));
        MultiBz2 { streams, dec }
    }
}

impl<R: Read> Read for MultiBz2<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            let n = self.dec.read(out)?;
            if n > 0 || out.is_empty() {
                return Ok(n);
            }
            if !self.streams.borrow_mut().next_stream()? {
                return Ok(0);
            }
            self.dec = DecoderReader::new(Shared(self.streams.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `printf '1\n2\n3\n' | bzip2`
    const ONE: [u8; 43] = [
        0x42, 0x5a, 0x68, 0x39, 0x31, 0x41, 0x59, 0x26, 0x53, 0x59, 0x12, 0x5d, 0x9f, 0x8a, 0x00,
        0x00, 0x01, 0xc8, 0x00, 0x00, 0x10, 0x38, 0x00, 0x20, 0x00, 0x21, 0x9a, 0x68, 0x33, 0x4d,
        0x1c, 0xb7, 0x8b, 0xb9, 0x22, 0x9c, 0x28, 0x48, 0x09, 0x2e, 0xcf, 0xc5, 0x00,
    ];
    /// `printf '4\n5\n' | bzip2`
    const TWO: [u8; 41] = [
        0x42, 0x5a, 0x68, 0x39, 0x31, 0x41, 0x59, 0x26, 0x53, 0x59, 0xdc, 0xc2, 0xa3, 0x73, 0x00,
        0x00, 0x01, 0x48, 0x00, 0x00, 0x10, 0x06, 0x00, 0x20, 0x00, 0x30, 0xcc, 0x0c, 0x7a, 0x82,
        0x71, 0x77, 0x24, 0x53, 0x85, 0x09, 0x0d, 0xcc, 0x2a, 0x37, 0x30,
    ];
    /// `printf '' | bzip2`: a stream of no block.
    const EMPTY: [u8; 14] = [
        0x42, 0x5a, 0x68, 0x39, 0x17, 0x72, 0x45, 0x38, 0x50, 0x90, 0x00, 0x00, 0x00, 0x00,
    ];

    fn read_all(bytes: &[u8]) -> io::Result<String> {
        let mut s = String::new();
        MultiBz2::new(bytes).read_to_string(&mut s)?;
        Ok(s)
    }

    #[test]
    fn every_stream_of_a_file_is_read_in_order() {
        assert_eq!(read_all(&ONE).unwrap(), "1\n2\n3\n");
        let both: Vec<u8> = [&ONE[..], &EMPTY[..], &TWO[..]].concat();
        assert_eq!(read_all(&both).unwrap(), "1\n2\n3\n4\n5\n");
        let again: Vec<u8> = [&TWO[..], &ONE[..]].concat();
        assert_eq!(read_all(&again).unwrap(), "4\n5\n1\n2\n3\n");
        // The decoder alone stops after the first stream.
        let mut s = String::new();
        DecoderReader::new(&both[..])
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "1\n2\n3\n");
    }

    /// Bytes after the last stream that are not a stream are refused, also
    /// those the decoder takes in with the stream's end; a stream ending
    /// in its last byte, and one followed by another, pass.
    #[test]
    fn bytes_after_the_last_stream_are_refused() {
        for junk in [&b"x"[..], b"\n", b"garbage after it", &[0u8; 700]] {
            for stream in [&ONE[..], &TWO[..], &EMPTY[..]] {
                let with: Vec<u8> = [stream, junk].concat();
                let e = read_all(&with).unwrap_err();
                assert!(e.to_string().contains("not another stream"), "{e}");
            }
        }
        let both: Vec<u8> = [&ONE[..], &TWO[..]].concat();
        assert_eq!(read_all(&both).unwrap(), "1\n2\n3\n4\n5\n");
        assert_eq!(read_all(&EMPTY).unwrap(), "");
    }

    #[test]
    fn a_cut_stream_is_an_error() {
        assert!(read_all(&ONE[..30]).is_err());
        let cut: Vec<u8> = [&ONE[..], &TWO[..20]].concat();
        assert!(read_all(&cut).is_err());
    }
}
