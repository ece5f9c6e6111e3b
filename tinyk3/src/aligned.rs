//! Page-aligned f32 buffers: what O_DIRECT reads need and what tiers hold.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ops::{Deref, DerefMut};

/// Alignment of every buffer and every on-disk expert and trunk segment.
pub const ALIGN: usize = 4096;

/// A zeroed, `ALIGN`-aligned heap buffer of f32s whose byte length is a multiple of `ALIGN`.
pub struct AlignedBuf {
    ptr: *mut f32,
    len: usize,
    layout: Layout,
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
        }
    }

    /// The whole buffer as bytes, for reads from disk.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
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
        // SAFETY: ptr is valid for len f32s and exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this exact layout.
        unsafe { dealloc(self.ptr as *mut u8, self.layout) }
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
}
