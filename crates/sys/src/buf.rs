//! Page-aligned I/O buffers, split into equal slots (one per queue slot). O_DIRECT needs
//! buffers aligned to the device's logical block size; 4096 covers every device we meet.

pub const ALIGN: usize = 4096;

/// `n` slots of `slot_size` bytes each, every slot starting on a 4096-byte boundary.
/// The memory never moves or grows after creation (the kernel may hold pointers into it).
#[derive(Debug)]
pub struct SlotBuffers {
    mem: Vec<u8>,
    base: usize,
    slot_size: usize,
    n: usize,
}

impl SlotBuffers {
    pub fn new(n: usize, slot_size: usize) -> Self {
        let slot_size = slot_size.div_ceil(ALIGN) * ALIGN;
        let mem = vec![0u8; n * slot_size + ALIGN];
        let base = mem.as_ptr().align_offset(ALIGN);
        SlotBuffers {
            mem,
            base,
            slot_size,
            n,
        }
    }

    pub fn slots(&self) -> usize {
        self.n
    }

    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    pub fn slot(&self, i: usize) -> &[u8] {
        let s = self.base + i * self.slot_size;
        &self.mem[s..s + self.slot_size]
    }

    pub fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        let s = self.base + i * self.slot_size;
        &mut self.mem[s..s + self.slot_size]
    }

    /// Raw pointer to slot `i`, for the kernel. Stays valid as long as `self` lives.
    pub(super) fn slot_ptr(&mut self, i: usize) -> *mut u8 {
        self.slot_mut(i).as_mut_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_aligned_and_disjoint() {
        let mut b = SlotBuffers::new(3, 5000);
        assert_eq!(b.slot_size(), 8192);
        for i in 0..3 {
            assert_eq!(b.slot_ptr(i) as usize % ALIGN, 0);
            b.slot_mut(i).fill(i as u8 + 1);
        }
        for i in 0..3 {
            assert!(b.slot(i).iter().all(|&x| x == i as u8 + 1));
        }
    }
}
