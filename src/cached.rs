//! Files read and written through the page cache (synchronous path).
//!
//! A [`CachedStore`] joins a [`Store`] and a [`PageCache`]: every file opened
//! through it gets a cache file id, and the cache's pages of that file are
//! loaded from and written back to its backing files. Reads of any length and
//! alignment copy from cached pages; misses read straight into the cache's
//! frames (O_DIRECT, no bounce buffer); writes mark pages dirty (a partial write
//! of an absent page reads it first, a whole-page write does not). A dirty page
//! reaches the devices when its set needs the frame, or at [`CachedFile::sync`],
//! which then makes the devices durable. A failed write-back leaves the page
//! dirty and is reported by the next `sync` of its file.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crate::cache::{CacheOptions, MAX_FILE_ID, PageCache};
use crate::error::{Error, Result};
use crate::file::File;
use crate::flusher::{FlushOptions, Flusher, Writer};
use crate::layout::LayoutKind;
use crate::store::Store;

/// A store whose files are read and written through one page cache.
pub struct CachedStore {
    pub(crate) inner: Arc<Shared>,
    flusher: Option<Flusher>,
}

pub(crate) struct Shared {
    store: Store,
    pub(crate) cache: PageCache,
    files: RwLock<HashMap<u32, Arc<Entry>>>,
    next_id: AtomicU32,
}

/// What the cache needs of an open file: where its pages go, and its first
/// write-back failure not yet reported.
pub(crate) struct Entry {
    pub(crate) file: File,
    failed: Mutex<Option<Error>>,
}

/// A file of a [`CachedStore`]. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct CachedFile {
    pub(crate) shared: Arc<Shared>,
    pub(crate) entry: Arc<Entry>,
    pub(crate) id: u32,
    pub(crate) read_only: bool,
}

impl CachedStore {
    /// Put a page cache built from `opts` in front of `store`, with a
    /// background flusher (see [`FlushOptions`]). The cache's page size must
    /// be a multiple of 512 bytes (direct I/O reads whole frames).
    pub fn new(store: Store, opts: CacheOptions) -> Result<CachedStore> {
        CachedStore::with_flusher(store, opts, Some(FlushOptions::default()))
    }

    /// As [`CachedStore::new`], with the flusher configured (or, with `None`,
    /// without one: dirty pages then reach the devices only when evicted or
    /// synced).
    pub fn with_flusher(
        store: Store,
        opts: CacheOptions,
        flush: Option<FlushOptions>,
    ) -> Result<CachedStore> {
        let cache = PageCache::new(opts)?;
        let inner = Arc::new(Shared {
            store,
            cache,
            files: RwLock::new(HashMap::new()),
            next_id: AtomicU32::new(0),
        });
        let flusher = match flush {
            Some(f) => Some(Flusher::start(inner.clone(), f)?),
            None => None,
        };
        Ok(CachedStore { inner, flusher })
    }

    /// Pages the flusher has written back, and device writes it issued
    /// (fewer when neighbours were merged).
    pub fn flusher_counts(&self) -> (u64, u64) {
        self.flusher.as_ref().map_or((0, 0), Flusher::counts)
    }

    /// The store underneath.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The page cache.
    pub fn cache(&self) -> &PageCache {
        &self.inner.cache
    }

    /// Create a file (as [`Store::create`]) and open it through the cache.
    pub fn create(&self, name: &str, size: u64, layout: LayoutKind) -> Result<CachedFile> {
        let f = self.inner.store.create(name, size, layout)?;
        self.attach(f, false)
    }

    /// Open an existing file through the cache.
    pub fn open_file(&self, name: &str) -> Result<CachedFile> {
        let f = self.inner.store.open_file(name)?;
        self.attach(f, false)
    }

    /// Open an existing file through the cache for reading only: writes
    /// through this handle fail with [`Error::ReadOnly`].
    pub fn open_file_read_only(&self, name: &str) -> Result<CachedFile> {
        let f = self.inner.store.open_file(name)?;
        self.attach(f, true)
    }

    fn attach(&self, file: File, read_only: bool) -> Result<CachedFile> {
        // A file opened twice shares its cache id: one copy of each page. The
        // table stays locked from the search to the insertion, so two threads
        // opening one file at once get one id.
        let name = file.name();
        let mut files = self.inner.files.write().unwrap_or_else(|p| p.into_inner());
        let (id, entry) = match files.iter().find(|(_, e)| e.file.name() == name) {
            Some((&id, e)) => (id, e.clone()),
            None => {
                let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
                if id > MAX_FILE_ID {
                    return Err(Error::InvalidArgument(format!(
                        "more than {} files opened through one cache",
                        MAX_FILE_ID as u64 + 1
                    )));
                }
                let entry = Arc::new(Entry {
                    file,
                    failed: Mutex::new(None),
                });
                files.insert(id, entry.clone());
                (id, entry)
            }
        };
        Ok(CachedFile {
            shared: self.inner.clone(),
            entry,
            id,
            read_only,
        })
    }

    /// Write every dirty page of every file and make the devices durable.
    pub fn sync(&self) -> Result<()> {
        let files: Vec<u32> = self
            .inner
            .files
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .copied()
            .collect();
        let mut first = None;
        for id in files {
            if let Err(e) = self.inner.sync_file(id) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for CachedStore {
    fn drop(&mut self) {
        if let Some(f) = self.flusher.take() {
            f.stop();
        }
    }
}

impl Shared {
    pub(crate) fn entry(&self, id: u32) -> Result<Arc<Entry>> {
        self.files
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
            .ok_or_else(|| Error::InvalidArgument(format!("cache file id {id} is not open")))
    }

    /// Read page `page` of file `id` into `frame` (zeros past the end).
    pub(crate) fn load(&self, id: u32, page: u64, frame: &mut [u8]) -> Result<()> {
        let e = self.entry(id)?;
        let ps = frame.len() as u64;
        let off = page * ps;
        let len = e.file.len();
        let n = len.saturating_sub(off).min(ps) as usize;
        if n > 0 {
            e.file.read_at(off, &mut frame[..n])?;
        }
        frame[n..].fill(0);
        Ok(())
    }

    /// Write page `page` of file `id` (the part inside the file). A failure is
    /// remembered for the file's next `sync`.
    pub(crate) fn store_page(&self, id: u32, page: u64, bytes: &[u8]) -> Result<()> {
        let e = self.entry(id)?;
        let ps = bytes.len() as u64;
        let off = page * ps;
        let n = e.file.len().saturating_sub(off).min(ps) as usize;
        let r = if n > 0 {
            e.file.write_at(off, &bytes[..n])
        } else {
            Ok(())
        };
        if let Err(err) = &r {
            e.failed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert_with(|| err.clone());
        }
        r
    }

    /// Remember a failed write-back of file `id` for its next `sync`.
    pub(crate) fn remember_failure(&self, id: u32, err: Error) {
        if let Ok(e) = self.entry(id) {
            e.failed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(err);
        }
    }

    /// Write back every dirty page of file `id` (32 writes in flight, dirty
    /// neighbours merged into one write), waiting for pages that are busy (a
    /// writer holds them, or another write-back runs), then fsync.
    fn sync_file(&self, id: u32) -> Result<()> {
        let e = self.entry(id)?;
        let mut pending: Vec<u64> = self
            .cache
            .pending_pages()
            .into_iter()
            .filter(|&(f, _)| f == id)
            .map(|(_, p)| p)
            .collect();
        pending.sort_unstable();
        let mut w = Writer::new(self, SYNC_DEPTH, SYNC_MERGE, false);
        let mut pause = 1u64;
        while !pending.is_empty() {
            let mut busy = Vec::new();
            for p in pending {
                if !w.write(id, p) && self.cache.write_pending(id, p)? {
                    // Busy (a writer holds it, or a write-back is in flight,
                    // perhaps our own): wait for it, so that the fsync below
                    // covers the bytes.
                    busy.push(p);
                }
            }
            w.poll();
            pending = busy;
            if !pending.is_empty() {
                if w.in_flight() > 0 {
                    w.wait_one();
                } else {
                    std::thread::sleep(Duration::from_micros(pause));
                    pause = (pause * 2).min(1000);
                }
            }
        }
        w.drain();
        // Failures of this sync's writes were remembered for the file too.
        let earlier = e.failed.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(err) = earlier.or(w.failed.take()) {
            return Err(err);
        }
        e.file.sync()
    }
}

/// Writes in flight during `sync`.
const SYNC_DEPTH: usize = 32;
/// Most pages `sync` merges into one write.
const SYNC_MERGE: usize = 32;

impl CachedFile {
    /// The file underneath.
    pub fn file(&self) -> &File {
        &self.entry.file
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.entry.file.len()
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Read up to `buf.len()` bytes at `offset` (any alignment); returns how many
    /// (fewer only at the end of the file; 0 at the end). An offset past the
    /// end is an error ([`Error::OutOfRange`]).
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let len = self.len();
        if offset > len {
            return Err(Error::OutOfRange {
                file: self.entry.file.name(),
                offset,
                len: buf.len() as u64,
                file_len: len,
            });
        }
        if offset == len {
            return Ok(0);
        }
        let n = (buf.len() as u64).min(len - offset) as usize;
        let sh = &*self.shared;
        let ps = sh.cache.page_size() as u64;
        let mut done = 0usize;
        while done < n {
            let pos = offset + done as u64;
            let page = pos / ps;
            let in_page = (pos % ps) as usize;
            let take = (ps as usize - in_page).min(n - done);
            if sh
                .cache
                .try_read(self.id, page, in_page, &mut buf[done..done + take])?
            {
                done += take;
                continue;
            }
            let g = sh.cache.get_with(
                self.id,
                page,
                |f, p, frame| sh.load(f, p, frame),
                |f, p, bytes| sh.store_page(f, p, bytes),
            )?;
            buf[done..done + take].copy_from_slice(&g[in_page..in_page + take]);
            done += take;
        }
        Ok(n)
    }

    /// Write all of `data` at `offset` (any alignment; within the file's length).
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly(self.entry.file.name()));
        }
        let len = self.len();
        if offset
            .checked_add(data.len() as u64)
            .is_none_or(|end| end > len)
        {
            return Err(Error::OutOfRange {
                file: self.entry.file.name(),
                offset,
                len: data.len() as u64,
                file_len: len,
            });
        }
        let sh = &*self.shared;
        let ps = sh.cache.page_size() as u64;
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let page = pos / ps;
            let in_page = (pos % ps) as usize;
            let take = (ps as usize - in_page).min(data.len() - done);
            let whole = in_page == 0 && take == ps as usize;
            // A whole-page write needs no read of the old bytes.
            let mut g = sh.cache.get_mut_with(
                self.id,
                page,
                |f, p, frame| if whole { Ok(()) } else { sh.load(f, p, frame) },
                |f, p, bytes| sh.store_page(f, p, bytes),
            )?;
            g[in_page..in_page + take].copy_from_slice(&data[done..done + take]);
            done += take;
        }
        Ok(())
    }

    /// Sync, then let go of this handle. The file stays known to the cache (its
    /// clean pages may still be cached; dirty pages written later through
    /// another handle are still written back).
    pub fn close(self) -> Result<()> {
        self.sync()
    }

    /// Write every dirty page of this file and make it durable. Returns the
    /// first write-back failure since the last `sync`, if any (the pages stay
    /// dirty, so a later `sync` tries again).
    pub fn sync(&self) -> Result<()> {
        self.shared.sync_file(self.id)
    }
}
