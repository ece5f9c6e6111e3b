//! Cold reads that bypass the page cache, so a miss costs a real disk read.
//!
//! The file is opened with `O_DIRECT`. Filesystems that refuse it (tmpfs, some
//! overlayfs) return `EINVAL`; then every read is preceded and followed by
//! `posix_fadvise(POSIX_FADV_DONTNEED)` on its range, which drops the pages so the
//! `pread` goes to the device and leaves nothing cached behind. The mode used is
//! reported as `cold_read_mode`.
//!
//! What is made resident once at start-up (the resident trunk, pinned experts) is
//! instead loaded through the page cache ([`ColdReader::load`]): mapped and
//! populated once, as mmap-based serving stacks load their weights, so a restart
//! on a warm machine maps pages instead of reading the device. Only the
//! reads that recur while decoding (cache misses, the non-resident trunk) must pay
//! the device, and those keep the bypass.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::aligned::{ALIGN, AlignedBuf};

/// How cold reads bypass the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColdMode {
    /// `O_DIRECT` reads into aligned buffers.
    Direct,
    /// `pread` bracketed by `posix_fadvise(DONTNEED)` on the range.
    FadviseDontneed,
}

impl ColdMode {
    /// The name reported in the bench JSON.
    pub fn name(self) -> &'static str {
        match self {
            ColdMode::Direct => "o_direct",
            ColdMode::FadviseDontneed => "pread_fadvise_dontneed",
        }
    }
}

/// A file read around the page cache, counting the bytes it reads.
pub struct ColdReader {
    file: File,
    /// A second, buffered descriptor for start-up loads through the page cache.
    buffered: File,
    path: PathBuf,
    mode: ColdMode,
    bytes_read: AtomicU64,
}

impl ColdReader {
    /// Opens `path`, preferring `O_DIRECT` and falling back when the filesystem refuses it.
    pub fn open(path: &Path) -> std::io::Result<ColdReader> {
        if let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            // Some filesystems accept the flag at open and refuse the first read.
            let mut probe = AlignedBuf::new(ALIGN);
            match file.read_at(probe.as_bytes_mut(), 0) {
                Ok(_) => {
                    return Ok(ColdReader {
                        file,
                        buffered: File::open(path)?,
                        path: path.to_path_buf(),
                        mode: ColdMode::Direct,
                        bytes_read: AtomicU64::new(0),
                    });
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                Err(e) => return Err(e),
            }
        }
        let file = File::open(path)?;
        Ok(ColdReader {
            buffered: file.try_clone()?,
            file,
            path: path.to_path_buf(),
            mode: ColdMode::FadviseDontneed,
            bytes_read: AtomicU64::new(0),
        })
    }

    /// The bypass mode in use.
    pub fn mode(&self) -> ColdMode {
        self.mode
    }

    /// The file being read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes read from the device so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    /// Loads `len` bytes at aligned `offset` through the page cache, for data that stays resident.
    ///
    /// The range is mapped private and populated ([`AlignedBuf::map`]): on a warm
    /// page cache that is a page-table update, on a cold one the kernel reads the
    /// range from the device now. A range past the end of the file is an error.
    pub fn load(&self, offset: u64, len: usize) -> std::io::Result<AlignedBuf> {
        let file_len = self.buffered.metadata()?.len();
        if offset + len as u64 > file_len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "file ends at byte {file_len} but {len} bytes were needed from offset {offset}"
                ),
            ));
        }
        AlignedBuf::map(&self.buffered, offset, len)
    }

    /// Fills `buf[..len]` (len rounded up to `ALIGN`) from aligned `offset`; a short file is an error.
    pub fn read_into(&self, offset: u64, len: usize, buf: &mut AlignedBuf) -> std::io::Result<()> {
        debug_assert_eq!(offset % ALIGN as u64, 0);
        let len = crate::aligned::round_up(len as u64) as usize;
        let bytes = &mut buf.as_bytes_mut()[..len];
        if self.mode == ColdMode::FadviseDontneed {
            self.dontneed(offset, len);
        }
        let mut done = 0;
        while done < len {
            match self.file.read_at(&mut bytes[done..], offset + done as u64) {
                Ok(0) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!(
                            "file ends at byte {} but {} bytes were needed from offset {offset}",
                            offset + done as u64,
                            len
                        ),
                    ));
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.mode == ColdMode::FadviseDontneed {
            self.dontneed(offset, len);
        }
        self.bytes_read.fetch_add(len as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Reads `len` bytes at aligned `offset` into a new buffer.
    pub fn read(&self, offset: u64, len: usize) -> std::io::Result<AlignedBuf> {
        let mut buf = AlignedBuf::new(len);
        self.read_into(offset, len, &mut buf)?;
        Ok(buf)
    }

    fn dontneed(&self, offset: u64, len: usize) {
        // Advice only: if the kernel ignores it the read is merely warmer, never wrong.
        // SAFETY: plain syscall on a valid fd.
        unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                offset as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            );
        }
    }
}
