//! Page-aligned f32 buffers: what O_DIRECT reads need and what tiers hold.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ops::{Deref, DerefMut};

/// Alignment of every buffer and every on-disk expert and trunk segment.
pub const ALIGN: usize = 4096;

/// An `ALIGN`-aligned buffer of f32s whose byte length is a multiple of `ALIGN`:
/// zeroed heap memory, or a read-only private mapping of a file range ([`AlignedBuf::map`]).
pub struct AlignedBuf {
    ptr: *mut f32,
    len: usize,
    layout: Layout,
    mapped: bool,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<f32>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out &[f32], like a Vec<f32>.
unsafe impl Sync for AlignedBuf {}

/// Rounds `bytes` up to a multiple of `ALIGN`.
pub fn round_up(bytes: u64) -> u64 {
    bytes.div_ceil(ALIGN as u64) * ALIGN as u64
}

impl AlignedBuf {
    /// A buffer of at least `bytes` bytes (rounded up to `ALIGN`).
    pub fn new(bytes: usize) -> Self {
        let size = (round_up(bytes as u64) as usize).max(ALIGN);
        let layout = Layout::from_size_align(size, ALIGN).expect("valid layout");
        // SAFETY: size is non-zero and the layout is valid.
        let ptr = unsafe { alloc_zeroed(layout) } as *mut f32;
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf {
            ptr,
            len: size / 4,
            layout,
            mapped: false,
        }
    }

    /// `bytes` of `file` from page-aligned `offset`, mapped private, read-only and populated.
    ///
    /// The pages are the page cache's own (no copy, no zeroing); `MAP_POPULATE`
    /// faults them all in now, reading from the device what is not cached, so
    /// using the buffer later never waits for I/O. The caller checks the file
    /// is long enough: the tail of the last page past the end of file reads as zeros.
    pub fn map(file: &std::fs::File, offset: u64, bytes: usize) -> std::io::Result<Self> {
        use std::os::unix::io::AsRawFd;
        debug_assert_eq!(offset % ALIGN as u64, 0);
        let size = (round_up(bytes as u64) as usize).max(ALIGN);
        // SAFETY: a fresh private mapping of a valid fd; checked for MAP_FAILED below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                // Read-only: populating a writable private mapping would copy every page.
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_POPULATE,
                file.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(AlignedBuf {
            ptr: ptr as *mut f32,
            len: size / 4,
            layout: Layout::from_size_align(size, ALIGN).expect("valid layout"),
            mapped: true,
        })
    }

    /// The whole buffer as bytes, for reads from disk (heap buffers only).
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        assert!(!self.mapped, "a mapped buffer is read-only");
        // SAFETY: the allocation is layout.size() bytes and exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.layout.size()) }
    }

    /// Size in bytes.
    pub fn byte_len(&self) -> usize {
        self.layout.size()
    }
}

impl Deref for AlignedBuf {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        // SAFETY: ptr is valid for len f32s for the lifetime of self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [f32] {
        assert!(!self.mapped, "a mapped buffer is read-only");
        // SAFETY: ptr is valid for len f32s and exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: mapped in `map` with this exact size, unmapped once.
            unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.layout.size()) };
        } else {
            // SAFETY: allocated in `new` with this exact layout.
            unsafe { dealloc(self.ptr as *mut u8, self.layout) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_rounded() {
        let b = AlignedBuf::new(10);
        assert_eq!(b.as_ptr() as usize % ALIGN, 0);
        assert_eq!(b.byte_len(), ALIGN);
        assert_eq!(round_up(4097), 8192);
    }

    #[test]
    fn a_mapped_range_holds_the_file_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.bin");
        let floats: Vec<f32> = (0..3 * ALIGN / 4).map(|i| i as f32 * 0.5).collect();
        let bytes: Vec<u8> = floats.iter().flat_map(|f| f.to_le_bytes()).collect();
        std::fs::write(&path, &bytes).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // The second page plus part of the third: the tail of the last page is the file's.
        let b = AlignedBuf::map(&file, ALIGN as u64, ALIGN + 8).unwrap();
        assert_eq!(b.as_ptr() as usize % ALIGN, 0);
        assert_eq!(b.byte_len(), 2 * ALIGN);
        assert_eq!(&b[..], &floats[ALIGN / 4..]);
    }
}
