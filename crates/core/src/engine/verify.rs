//! Verify mode: every `unit` bytes of written data start with a 32-byte header
//!
//! ```text
//! 0..8   magic "DPVERIFY"
//! 8..16  byte offset of this unit on the target (little endian)
//! 16..24 write sequence number of the write that carried it
//! 24..32 xxh3 of bytes 32..unit, seeded with offset and sequence
//! ```
//!
//! and reads check it: the offset catches misdirected writes and reads, the checksum
//! catches corrupted data, the sequence number (against what this run last wrote there)
//! catches lost writes: a drive that acknowledged a write and later returns older data.
//! This finds silent corruption, which no latency number does.

use serde::Serialize;
use xxhash_rust::xxh3::xxh3_64_with_seed;

pub const MAGIC: &[u8; 8] = b"DPVERIFY";
pub const HEADER: usize = 32;
/// How many mismatches each worker keeps the details of.
pub const MAX_RECORDS: usize = 32;

/// Sequence value meaning "a write here failed: content unknown".
const UNKNOWN: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MismatchKind {
    /// No header where one was expected.
    NoHeader,
    /// The header names another offset (misdirected write or read).
    WrongOffset,
    /// The data does not match its checksum.
    Checksum,
    /// The header is intact but older than the last write this run made (lost write).
    Stale,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    pub offset: u64,
    pub kind: MismatchKind,
    pub expected_seq: u64,
    pub found_seq: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifySummary {
    /// Units (blocks of the smallest transfer size) whose header was checked.
    pub checked: u64,
    pub mismatches: u64,
    /// The first mismatches, by offset.
    pub first: Vec<Mismatch>,
}

impl VerifySummary {
    pub fn merge(&mut self, other: VerifySummary) {
        self.checked += other.checked;
        self.mismatches += other.mismatches;
        self.first.extend(other.first);
        self.first.sort_by_key(|m| m.offset);
        self.first.truncate(MAX_RECORDS);
    }
}

fn checksum(payload: &[u8], offset: u64, seq: u64) -> u64 {
    xxh3_64_with_seed(payload, offset ^ seq.rotate_left(32))
}

/// Writes the header of every unit in `buf` (a write of `buf.len()` bytes at `offset`).
pub fn stamp(buf: &mut [u8], unit: usize, offset: u64, seq: u64) {
    for (i, chunk) in buf.chunks_exact_mut(unit).enumerate() {
        let off = offset + (i * unit) as u64;
        let sum = checksum(&chunk[HEADER..], off, seq);
        chunk[0..8].copy_from_slice(MAGIC);
        chunk[8..16].copy_from_slice(&off.to_le_bytes());
        chunk[16..24].copy_from_slice(&seq.to_le_bytes());
        chunk[24..32].copy_from_slice(&sum.to_le_bytes());
    }
}

/// Per-worker verify state over the worker's own part of the region (workers never
/// share blocks in verify mode, so no state is shared).
#[derive(Debug)]
pub struct VerifyState {
    unit: u64,
    base: u64,
    /// Last sequence written to each unit by this run (0: never, UNKNOWN: failed write).
    seqs: Vec<u32>,
    next_seq: u32,
    /// Reads of units this run never wrote must find a header (a read-only verify pass
    /// over data written by an earlier run).
    expect_written: bool,
    pub summary: VerifySummary,
}

impl VerifyState {
    pub fn new(unit: u64, base: u64, len: u64, expect_written: bool) -> Self {
        VerifyState {
            unit,
            base,
            seqs: vec![0; (len / unit) as usize],
            next_seq: 1,
            expect_written,
            summary: VerifySummary::default(),
        }
    }

    pub fn unit(&self) -> u64 {
        self.unit
    }

    /// Prepares a write buffer; returns the sequence number it carries.
    pub fn prepare_write(&mut self, buf: &mut [u8], offset: u64) -> u32 {
        let seq = self.next_seq;
        self.next_seq = if self.next_seq >= UNKNOWN - 1 {
            1
        } else {
            self.next_seq + 1
        };
        stamp(buf, self.unit as usize, offset, seq as u64);
        seq
    }

    fn index(&self, offset: u64) -> usize {
        ((offset - self.base) / self.unit) as usize
    }

    /// A write completed: successfully (`ok`) or not.
    pub fn written(&mut self, offset: u64, len: u32, seq: u32, ok: bool) {
        let first = self.index(offset);
        let n = (len as u64 / self.unit) as usize;
        let v = if ok { seq } else { UNKNOWN };
        for s in &mut self.seqs[first..first + n] {
            *s = v;
        }
    }

    fn mismatch(&mut self, m: Mismatch) {
        self.summary.mismatches += 1;
        if self.summary.first.len() < MAX_RECORDS {
            self.summary.first.push(m);
        }
    }

    /// Checks the units of a completed read.
    pub fn check_read(&mut self, buf: &[u8], offset: u64) {
        let unit = self.unit as usize;
        for (i, chunk) in buf.chunks_exact(unit).enumerate() {
            let off = offset + (i * unit) as u64;
            let expected = self.seqs[self.index(off)];
            if expected == UNKNOWN {
                continue;
            }
            let has_magic = &chunk[0..8] == MAGIC;
            if expected == 0 && !has_magic && !self.expect_written {
                continue; // never written by anyone we know of: nothing to check
            }
            self.summary.checked += 1;
            let exp = expected as u64;
            if !has_magic {
                self.mismatch(Mismatch {
                    offset: off,
                    kind: MismatchKind::NoHeader,
                    expected_seq: exp,
                    found_seq: 0,
                });
                continue;
            }
            let h_off = u64::from_le_bytes(chunk[8..16].try_into().expect("8 bytes"));
            let h_seq = u64::from_le_bytes(chunk[16..24].try_into().expect("8 bytes"));
            let h_sum = u64::from_le_bytes(chunk[24..32].try_into().expect("8 bytes"));
            let kind = if h_off != off {
                Some(MismatchKind::WrongOffset)
            } else if checksum(&chunk[HEADER..], h_off, h_seq) != h_sum {
                Some(MismatchKind::Checksum)
            } else if expected != 0 && h_seq != exp {
                Some(MismatchKind::Stale)
            } else {
                None
            };
            if let Some(kind) = kind {
                self.mismatch(Mismatch {
                    offset: off,
                    kind,
                    expected_seq: exp,
                    found_seq: h_seq,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_each_kind_of_damage() {
        let unit = 4096usize;
        let mut v = VerifyState::new(unit as u64, 0, 16 * unit as u64, false);
        let mut buf = vec![7u8; 2 * unit];
        let seq = v.prepare_write(&mut buf, 4 * unit as u64);
        v.written(4 * unit as u64, buf.len() as u32, seq, true);
        v.check_read(&buf, 4 * unit as u64);
        assert_eq!(v.summary.checked, 2);
        assert_eq!(v.summary.mismatches, 0);

        let mut bad = buf.clone();
        bad[100] ^= 1;
        v.check_read(&bad, 4 * unit as u64);
        assert_eq!(v.summary.first[0].kind, MismatchKind::Checksum);
        assert_eq!(v.summary.first[0].offset, 4 * unit as u64);

        // The same data read back at another offset: misdirected.
        v.written(6 * unit as u64, unit as u32, seq, true);
        v.check_read(&buf[..unit], 6 * unit as u64);
        assert_eq!(v.summary.first[1].kind, MismatchKind::WrongOffset);

        // A newer write that the drive "lost": the old block comes back.
        let old = buf.clone();
        let seq2 = v.prepare_write(&mut buf, 4 * unit as u64);
        v.written(4 * unit as u64, buf.len() as u32, seq2, true);
        v.check_read(&old, 4 * unit as u64);
        assert_eq!(v.summary.first[2].kind, MismatchKind::Stale);

        // Unwritten, headerless data is skipped in a mixed job...
        let zeros = vec![0u8; unit];
        let before = v.summary.checked;
        v.check_read(&zeros, 0);
        assert_eq!(v.summary.checked, before);
        // ...and is a mismatch in a read-only verify pass.
        let mut ro = VerifyState::new(unit as u64, 0, 16 * unit as u64, true);
        ro.check_read(&zeros, 0);
        assert_eq!(ro.summary.first[0].kind, MismatchKind::NoHeader);
    }
}
