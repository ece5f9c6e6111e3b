//! Cold reads that bypass the page cache, so a miss costs a real disk read.
//!
//! The file is opened with `O_DIRECT`. Filesystems that refuse it (tmpfs, some
//! overlayfs) return `EINVAL`; then every read is preceded and followed by
//! `posix_fadvise(POSIX_FADV_DONTNEED)` on its range, which drops the pages so the
//! `pread` goes to the device and leaves nothing cached behind. The mode used is
//! reported as `cold_read_mode`.

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
