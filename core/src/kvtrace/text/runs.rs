//! A token list's common items (1 to 4 digits without a leading zero, then
//! `,` or `]`) read with SSSE3, where the CPU has it: the separators among
//! eight bytes pick a precomputed step (which bytes are items and which
//! digits, where each item's digits go in four 32-bit lanes), one shuffle
//! gathers the digits and two multiply-adds make the values; up to four steps
//! follow each other in 32 bytes whose masks are made once. About two items a
//! step instead of one; any other item is read as `list_item` reads it, and
//! the caller reads what that does not.

use std::arch::x86_64::{
    __m128i, _mm_cmpeq_epi8, _mm_load_si128, _mm_loadu_si128, _mm_madd_epi16, _mm_maddubs_epi16, _mm_min_epu8,
    _mm_movemask_epi8, _mm_set1_epi16, _mm_set1_epi32, _mm_set1_epi8, _mm_set_epi64x, _mm_setzero_si128,
    _mm_shuffle_epi8, _mm_storeu_si128, _mm_sub_epi8, _mm_unpackhi_epi32, _mm_unpacklo_epi32,
};

use std::mem::MaybeUninit;

use super::list_item;

/// What eight bytes whose separators (`,` or `]`) are the bits of the step's
/// index make of them: a run of items, each 1 to 4 bytes then its separator.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Step {
    /// Per lane byte, the byte of the eight it takes (`0x80`: zero): item k's
    /// digits end lane k, most significant first.
    shuffle: [u8; 16],
    /// The bytes read (the items and their separators; each item's bytes must
    /// be digits) in the low 32 bits, and in the high 32 the first byte of each
    /// item of two or more bytes (which must not be `0`).
    check: u64,
    /// The bytes read.
    region: u32,
    /// Items read: 0 where the bytes do not begin with such a run.
    count: u32,
    /// Bytes read.
    len: u32,
}

const NONE: Step = Step {
    shuffle: [0x80; 16],
    check: 0,
    region: 0,
    count: 0,
    len: 0,
};

/// The step of eight bytes whose separators are the bits of `sep`.
const fn step(sep: usize) -> Step {
    let mut s = NONE;
    let (mut start, mut at) = (0, 0);
    while at < 8 {
        if sep & 1 << at != 0 {
            let len = at - start;
            if len == 0 || len > 4 {
                return NONE;
            }
            let lane = 4 * s.count as usize + 4 - len;
            let mut k = 0;
            while k < len {
                s.shuffle[lane + k] = (start + k) as u8;
                k += 1;
            }
            if len > 1 {
                s.check |= 1 << (32 + start);
            }
            s.count += 1;
            start = at + 1;
        }
        at += 1;
    }
    s.region = (1 << start) - 1;
    s.check |= s.region as u64;
    s.len = start as u32;
    s
}

/// Every step, by separator bits.
static STEPS: [Step; 256] = {
    let mut t = [NONE; 256];
    let mut sep = 0;
    while sep < 256 {
        t[sep] = step(sep);
        sep += 1;
    }
    t
};

/// The run of common items from `i`, appended to `tokens`: the position after
/// the last one read, and whether it closed the list; `None` where the CPU
/// has no SSSE3.
pub(super) fn items(b: &[u8], i: usize, tokens: &mut Vec<u64>) -> Option<(usize, bool)> {
    if is_x86_feature_detected!("ssse3") {
        // SAFETY: the CPU has SSSE3, which `ssse3_items` is compiled for.
        return Some(unsafe { ssse3_items(b, i, tokens) });
    }
    let _ = (b, i, tokens);
    None
}

/// The masks of 32 bytes: per byte, one bit.
#[derive(Clone, Copy)]
struct Masks {
    /// Separators up to the first `]` (all of them where there is none).
    sep: u32,
    /// What no step's region may hold (neither digit nor separator) in the low
    /// 32 bits, and the `0` digits (which no item may begin with) in the high.
    bad: u64,
    /// `]`.
    closes: u32,
}

/// The masks of 32 bytes, from two halves.
#[target_feature(enable = "ssse3")]
fn masks(c: &[u8; 32]) -> Masks {
    let mask = |m: __m128i| _mm_movemask_epi8(m) as u32;
    let half = |c: &[u8; 16]| {
        let v = load16(c);
        let digits = _mm_sub_epi8(v, _mm_set1_epi8(b'0' as i8));
        let is_digit = mask(_mm_cmpeq_epi8(_mm_min_epu8(digits, _mm_set1_epi8(9)), digits));
        let commas = mask(_mm_cmpeq_epi8(v, _mm_set1_epi8(b',' as i8)));
        let closes = mask(_mm_cmpeq_epi8(v, _mm_set1_epi8(b']' as i8)));
        let zeros = mask(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'0' as i8)));
        (is_digit, commas, closes, zeros)
    };
    let (d0, c0, e0, z0) = half(c.first_chunk::<16>().unwrap());
    let (d1, c1, e1, z1) = half(c.last_chunk::<16>().unwrap());
    let (digits, commas, closes, zeros) = (d0 | d1 << 16, c0 | c1 << 16, e0 | e1 << 16, z0 | z1 << 16);
    let sep = (commas | closes) & (closes ^ closes.wrapping_sub(1));
    Masks {
        sep,
        bad: u64::from(!(digits | sep)) | u64::from(zeros) << 32,
        closes,
    }
}

impl Masks {
    /// The step of the eight bytes from `at` (at most 24), if they begin with a
    /// run of common items.
    #[inline(always)]
    fn step(self, at: u32) -> Option<&'static Step> {
        let s = &STEPS[(self.sep >> at & 0xFF) as usize];
        // A zero digit before `at` lands at bit 32 - at or above, clear of the region's 8.
        (s.count != 0 && (self.bad >> at) & s.check == 0).then_some(s)
    }
}

/// The values of step `s`'s items in the eight bytes `w`, in four 64-bit lanes (two vectors).
#[target_feature(enable = "ssse3")]
fn values(w: &[u8; 8], s: &Step) -> [__m128i; 2] {
    let digits = _mm_sub_epi8(_mm_set_epi64x(0, i64::from_le_bytes(*w)), _mm_set1_epi8(b'0' as i8));
    // SAFETY: `STEPS` is 32-byte aligned, so each step's shuffle is 16-byte aligned.
    let shuffle = unsafe { _mm_load_si128(s.shuffle.as_ptr().cast()) };
    // Per byte pair 10 * first + second, then per pair of those 100 * first + second.
    let pairs = _mm_maddubs_epi16(_mm_shuffle_epi8(digits, shuffle), _mm_set1_epi16(0x010A));
    let values = _mm_madd_epi16(pairs, _mm_set1_epi32(0x0001_0064));
    let z = _mm_setzero_si128();
    [_mm_unpacklo_epi32(values, z), _mm_unpackhi_epi32(values, z)]
}

/// Up to four steps a loop, each from where the one before ends, all within
/// the 32 bytes whose masks they read (a step reads at most 8). Where none
/// reads an item (one of 5 or more digits), up to 8 items are read by
/// `list_item`, so that lists of such items take the steps seldom.
#[target_feature(enable = "ssse3")]
fn ssse3_items(b: &[u8], mut i: usize, tokens: &mut Vec<u64>) -> (usize, bool) {
    // 40 bytes: the 32 the masks cover, and 8 more so that a step's word at
    // any offset below 32 is in them (steps begin at 24 at most).
    while let Some(c) = b.get(i..).and_then(<[u8]>::first_chunk::<40>) {
        let m = masks(c.first_chunk::<32>().unwrap());
        tokens.reserve(20);
        let spare = &mut tokens.spare_capacity_mut()[..20];
        let (mut count, mut at) = (0, 0);
        // Once a step reads the list's `]`, the next finds no separator (`sep` ends there) and reads nothing.
        for _ in 0..4 {
            let Some(s) = m.step(at) else {
                break;
            };
            // At most 24 and 12 (three steps of at most 8 bytes and 4 items come
            // before); the masks only tell the compiler that the reads are in bounds.
            let w = c[(at & 31) as usize..].first_chunk::<8>().unwrap();
            store(&mut spare[count & 15..], values(w, s));
            count += s.count as usize;
            at += s.len;
        }
        if count == 0 {
            for _ in 0..8 {
                let Some(w) = b.get(i..).and_then(<[u8]>::first_chunk::<8>) else {
                    return (i, false);
                };
                let Some((n, len, closed)) = list_item(u64::from_le_bytes(*w)) else {
                    return (i, false);
                };
                tokens.push(n);
                i += len + 1;
                if closed {
                    return (i, true);
                }
            }
            continue;
        }
        // SAFETY: the `count` values after the tokens were written above.
        unsafe { tokens.set_len(tokens.len() + count) };
        i += at as usize;
        if m.closes & ((1u64 << at) - 1) as u32 != 0 {
            return (i, true);
        }
    }
    super::items_swar(b, i, tokens)
}

/// Sixteen bytes as a vector.
#[target_feature(enable = "ssse3")]
fn load16(c: &[u8; 16]) -> __m128i {
    // SAFETY: `c` is sixteen readable bytes; the load has no alignment needs.
    unsafe { _mm_loadu_si128(c.as_ptr().cast()) }
}

/// Four values (two vectors of two) written to `out`.
#[target_feature(enable = "ssse3")]
fn store(out: &mut [MaybeUninit<u64>], v: [__m128i; 2]) {
    let out = &mut out[..4];
    let p = out.as_mut_ptr().cast::<__m128i>();
    // SAFETY: `out` is four u64s, which the two unaligned stores fill.
    unsafe {
        _mm_storeu_si128(p, v[0]);
        _mm_storeu_si128(p.add(1), v[1]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::items_swar;

    /// A small deterministic generator (xorshift64).
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// A token list's text from its `[`: items of 1 to 9 digits (mostly 1 to
    /// 4), now and then a leading zero, a space, an empty item or another byte
    /// in place of a separator, then what follows the list.
    fn list(r: &mut Rng) -> String {
        let mut s = String::from("[");
        for k in 0..r.below(40) {
            if k > 0 {
                s.push_str([",", ",", ",", ",", ",", ",", ",", ",", ", ", ",,", "x", "]"][r.below(12) as usize]);
            }
            let digits = [1, 1, 2, 3, 3, 3, 4, 4, 5, 7, 8, 9][r.below(12) as usize];
            for d in 0..digits {
                let first = d == 0 && digits > 1 && r.below(30) != 0;
                s.push(char::from(b'0' + (r.below(9) + u64::from(first)) as u8));
            }
        }
        s.push(']');
        let tails = [
            "",
            "}",
            "},\n{\"id\":\"r1\",\"op\":\"free\"}",
            "]}",
            " ]",
            "0000000000000000",
        ];
        s.push_str(tails[r.below(tails.len() as u64) as usize]);
        s
    }

    /// The common items from `i` read a byte at a time: their values, the
    /// position after the last one, and whether it closed the list.
    fn by_bytes(b: &[u8], mut i: usize) -> (Vec<u64>, usize, bool) {
        let mut values = Vec::new();
        loop {
            let digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
            let lead_zero = digits > 1 && b[i] == b'0';
            let Some(&sep @ (b',' | b']')) = b.get(i + digits) else {
                return (values, i, false);
            };
            if digits == 0 || digits > 7 || lead_zero {
                return (values, i, false);
            }
            values.push(std::str::from_utf8(&b[i..i + digits]).unwrap().parse().unwrap());
            i += digits + 1;
            if sep == b']' {
                return (values, i, true);
            }
        }
    }

    /// Runs read the common items a byte at a time reads, with the same values,
    /// up to the same byte; as the word-at-a-time loop, they may stop sooner
    /// only in a text's last 8 bytes, where an item is read by the caller.
    #[test]
    fn runs_read_the_common_items() {
        assert!(is_x86_feature_detected!("ssse3"), "the runs are not tested here");
        let mut r = Rng(0x9E37_79B9_7F4A_7C15);
        let (mut closed, mut short) = (0, 0);
        for _ in 0..20_000 {
            let text = list(&mut r);
            for cut in [text.len(), text.len().saturating_sub(3).max(1), text.len() / 2] {
                let b = &text.as_bytes()[..cut];
                let (values, end, ends_list) = by_bytes(b, 1);
                let (mut runs, mut words) = (vec![7], vec![7]);
                for (read, tokens) in [
                    (super::items(b, 1, &mut runs).unwrap(), &runs),
                    (items_swar(b, 1, &mut words), &words),
                ] {
                    let (at, ends) = read;
                    let n = tokens.len() - 1;
                    assert_eq!(tokens[1..], values[..n], "{text:?} cut at {cut}");
                    if at < end {
                        assert!(b.len() - at < 8, "{text:?} cut at {cut}: {at}");
                        short += 1;
                    } else {
                        assert_eq!((at, ends, n), (end, ends_list, values.len()), "{text:?} cut at {cut}");
                    }
                }
                closed += usize::from(ends_list);
            }
        }
        assert!(closed > 10_000 && short > 1_000, "{closed} {short}");
    }

    /// Each step's items are what its separator bits make of eight bytes.
    #[test]
    fn steps_follow_their_separators() {
        for (sep, s) in super::STEPS.iter().enumerate() {
            let mut starts = vec![0];
            starts.extend((0..8).filter(|k| sep & 1 << k != 0).map(|k| k + 1));
            let lens: Vec<usize> = starts.windows(2).map(|w| w[1] - w[0] - 1).collect();
            if lens.is_empty() || lens.iter().any(|&n| n == 0 || n > 4) {
                assert_eq!(s.count, 0, "{sep:08b}");
                continue;
            }
            assert_eq!(
                (s.count as usize, s.len as usize),
                (lens.len(), starts[lens.len()]),
                "{sep:08b}"
            );
            assert_eq!(s.region, (1 << s.len) - 1, "{sep:08b}");
        }
    }
}
