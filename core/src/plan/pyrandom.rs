//! CPython 3.11's `random.Random`, as far as Dynamo's synthetic benchmark prompts need it.
//!
//! Dynamo draws those prompts as `random.Random(seed).choices(range(lo, hi), k=len)`
//! (`_bench_synthetic_token_ids`, seed `f"dp{dp_rank}:{salt}"`). This is a port of what
//! that call does, bit for bit:
//!
//! * `Random.seed(a: str)` (version 2): `a = int.from_bytes(a.encode() + sha512(a.encode()).digest(), "big")`,
//!   then `_random.Random.seed` feeds the 32-bit words of `abs(a)`, least significant first
//!   (`keyused = max(1, ceil(bit_length / 32))` words), to MT19937's `init_by_array`.
//! * `genrand_uint32`: the reference MT19937 tempering.
//! * `random()`: `(a >> 5) * 67108864 + (b >> 6)) / 2**53` from two draws.
//! * `choices(population, k)` without weights: `population[floor(random() * float(n))]` per element.

use sha2::{Digest, Sha512};

const N: usize = 624;
const M: usize = 397;
const MATRIX_A: u32 = 0x9908_b0df;
const UPPER_MASK: u32 = 0x8000_0000;
const LOWER_MASK: u32 = 0x7fff_ffff;

/// The state of one `random.Random`.
#[derive(Clone)]
pub(crate) struct PyRandom {
    mt: [u32; N],
    index: usize,
}

impl PyRandom {
    /// `random.Random(seed)` for a `str` seed.
    pub(crate) fn from_str_seed(seed: &str) -> Self {
        let mut bytes = seed.as_bytes().to_vec();
        bytes.extend_from_slice(&Sha512::digest(seed.as_bytes()));
        Self::from_key(&be_bytes_to_le_words(&bytes))
    }

    /// `init_genrand(19650218)` then `init_by_array(key)`.
    fn from_key(key: &[u32]) -> Self {
        let mut mt = [0u32; N];
        mt[0] = 19_650_218;
        for i in 1..N {
            mt[i] = 1_812_433_253u32
                .wrapping_mul(mt[i - 1] ^ (mt[i - 1] >> 30))
                .wrapping_add(i as u32);
        }
        let mut i = 1usize;
        let mut j = 0usize;
        for _ in 0..N.max(key.len()) {
            mt[i] = (mt[i] ^ (mt[i - 1] ^ (mt[i - 1] >> 30)).wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            mt[i] = (mt[i] ^ (mt[i - 1] ^ (mt[i - 1] >> 30)).wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
        }
        mt[0] = 0x8000_0000;
        PyRandom { mt, index: N }
    }

    fn twist(&mut self) {
        let mag = |y: u32| if y & 1 == 0 { 0 } else { MATRIX_A };
        for kk in 0..N {
            let y = (self.mt[kk] & UPPER_MASK) | (self.mt[(kk + 1) % N] & LOWER_MASK);
            self.mt[kk] = self.mt[(kk + M) % N] ^ (y >> 1) ^ mag(y);
        }
        self.index = 0;
    }

    /// MT19937's `genrand_uint32` (`getrandbits(32)`).
    pub(crate) fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.twist();
        }
        let mut y = self.mt[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `random()`: a 53-bit float in [0, 1).
    pub(crate) fn random(&mut self) -> f64 {
        let a = self.next_u32() >> 5;
        let b = self.next_u32() >> 6;
        (f64::from(a) * 67_108_864.0 + f64::from(b)) * (1.0 / 9_007_199_254_740_992.0)
    }

    /// `choices(range(low, high), k=k)` without weights. `high - low` must be below 2**53
    /// (exact as a float); an empty range draws nothing only when `k == 0`, as in Python.
    pub(crate) fn choices_range(&mut self, low: u64, high: u64, k: u64) -> Vec<u64> {
        assert!(low <= high, "range({low}, {high}) is reversed");
        let n = high - low;
        assert!(n < 1 << 53, "range({low}, {high}) is too long to draw from exactly");
        if k > 0 {
            assert!(n > 0, "choices from an empty range");
        }
        let nf = n as f64;
        (0..k)
            .map(|_| {
                let idx = (self.random() * nf).floor() as u64;
                debug_assert!(idx < n);
                low + idx
            })
            .collect()
    }
}

/// The 32-bit words of the unsigned big-endian integer `bytes`, least significant first,
/// without most-significant zero words but at least one word (CPython's `random_seed`).
fn be_bytes_to_le_words(bytes: &[u8]) -> Vec<u32> {
    let mut words: Vec<u32> = bytes
        .rchunks(4)
        .map(|c| c.iter().fold(0u32, |w, &b| (w << 8) | u32::from(b)))
        .collect();
    while words.len() > 1 && words.last() == Some(&0) {
        words.pop();
    }
    if words.is_empty() {
        words.push(0);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::Sha256;

    /// The first 16 hex digits of sha256 over the values as little-endian u64s.
    fn digest(vals: &[u64]) -> String {
        let mut h = Sha256::new();
        for v in vals {
            h.update(v.to_le_bytes());
        }
        h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
    }

    /// (seed, k, low, high, first 8, sum, digest) from CPython 3.11.7:
    /// `v = random.Random(seed).choices(range(low, high), k=k)`,
    /// digest = `sha256(b"".join(struct.pack("<Q", x) for x in v)).hexdigest()[:16]`.
    #[allow(clippy::type_complexity)]
    const GOLDEN: &[(&str, u64, u64, u64, &[u64], u64, &str)] = &[
        ("dp0:__bench_17", 0, 1, 151552, &[], 0, "e3b0c44298fc1c14"),
        ("dp0:__bench_17", 1, 1, 151552, &[125550], 125550, "62f089d21550ee48"),
        (
            "dp0:__bench_17",
            5,
            1,
            151552,
            &[125550, 93440, 38784, 1043, 118568],
            377385,
            "3658c834e510f5e0",
        ),
        (
            "dp0:__bench_17",
            1000,
            1,
            151552,
            &[125550, 93440, 38784, 1043, 118568, 60619, 147544, 116440],
            75619656,
            "7af3d75ef8254e8a",
        ),
        (
            "dp0:__bench_17",
            70000,
            1,
            151552,
            &[125550, 93440, 38784, 1043, 118568, 60619, 147544, 116440],
            5317903753,
            "1bb7f1005e5886f3",
        ),
        (
            "dp1:__bench_0",
            5,
            1,
            200064,
            &[190513, 41369, 18636, 140079, 163036],
            553633,
            "4729c1414f2d9b9f",
        ),
        (
            "dp1:__bench_0",
            1000,
            1,
            200064,
            &[190513, 41369, 18636, 140079, 163036, 182956, 82333, 10372],
            99278385,
            "9f67c2bba5974a8e",
        ),
        (
            "dp1:__bench_0",
            70000,
            1,
            200064,
            &[190513, 41369, 18636, 140079, 163036, 182956, 82333, 10372],
            7005033577,
            "80cfab37fd31a19a",
        ),
        (
            "dp3:__bench_fake_prefix_12",
            1000,
            1,
            2,
            &[1, 1, 1, 1, 1, 1, 1, 1],
            1000,
            "57df658ee4a5eac7",
        ),
        (
            "dp0:salt-a",
            70000,
            1,
            2,
            &[1, 1, 1, 1, 1, 1, 1, 1],
            70000,
            "531c60c6b88d4fea",
        ),
        (
            "",
            1000,
            1,
            151552,
            &[145524, 90236, 58804, 111175, 33468, 52050, 94463, 146710],
            75986718,
            "26c6ad6d7647f895",
        ),
        (
            "dp0:\u{e9}\u{4e2d}",
            1000,
            0,
            128256,
            &[115850, 121939, 16680, 39711, 43963, 43909, 57030, 38841],
            62048292,
            "d2cde73aed5455c3",
        ),
        (
            "\u{0}\u{0}x",
            1000,
            1,
            151552,
            &[8952, 28597, 92949, 100826, 135257, 23167, 42895, 40077],
            78972419,
            "a267185132e6a593",
        ),
        (
            "a",
            5,
            1,
            151552,
            &[41227, 10205, 90918, 97630, 26564],
            266544,
            "a9b00f7ab79ad1c6",
        ),
    ];

    #[test]
    fn pyrandom_choices_match_cpython() {
        for &(seed, k, low, high, first, sum, dig) in GOLDEN {
            let v = PyRandom::from_str_seed(seed).choices_range(low, high, k);
            let ctx = format!("{seed:?} k={k} range({low}, {high})");
            assert_eq!(v.len() as u64, k, "{ctx}");
            assert_eq!(&v[..first.len()], first, "{ctx}");
            assert_eq!(v.iter().sum::<u64>(), sum, "{ctx}");
            assert_eq!(digest(&v), dig, "{ctx}");
            assert!(v.iter().all(|&t| (low..high).contains(&t)), "{ctx}");
        }
    }

    #[test]
    fn pyrandom_raw_stream_matches_cpython() {
        // random.Random("dp0:__bench_17"): getrandbits(32) x4, then a fresh one's random() x4.
        let mut r = PyRandom::from_str_seed("dp0:__bench_17");
        let words: Vec<u32> = (0..4).map(|_| r.next_u32()).collect();
        assert_eq!(words, [3558072898, 528110776, 2648083691, 146151754]);
        let mut r = PyRandom::from_str_seed("dp0:__bench_17");
        let floats: Vec<f64> = (0..4).map(|_| r.random()).collect();
        assert_eq!(
            floats,
            [
                0.828428403459194,
                0.6165550279172406,
                0.2559120347395286,
                0.006876203156890748
            ]
        );
    }

    #[test]
    fn pyrandom_seed_words() {
        // int.from_bytes(b"dp0:__bench_17" + sha512(...).digest(), "big"): 623 bits, so 20
        // words; the lowest is 0x715124c8, the highest 0x6470 ("dp").
        let mut bytes = b"dp0:__bench_17".to_vec();
        bytes.extend_from_slice(&Sha512::digest(b"dp0:__bench_17"));
        let w = be_bytes_to_le_words(&bytes);
        assert_eq!(w.len(), 20);
        assert_eq!(w[0], 0x7151_24c8);
        assert_eq!(w[19], 0x6470);
        assert_eq!(be_bytes_to_le_words(&[0, 0, 0, 0, 0, 1, 2]), [0x0102]);
        assert_eq!(be_bytes_to_le_words(&[1, 2, 3, 4, 5]), [0x0203_0405, 0x01]);
        assert_eq!(be_bytes_to_le_words(&[0, 0]), [0]);
        assert_eq!(be_bytes_to_le_words(&[]), [0]);
    }

    #[test]
    fn pyrandom_shorter_draw_is_a_prefix() {
        let long = PyRandom::from_str_seed("dp2:__bench_5").choices_range(1, 151552, 5000);
        for k in [0, 1, 7, 624, 625, 4999] {
            let short = PyRandom::from_str_seed("dp2:__bench_5").choices_range(1, 151552, k);
            assert_eq!(short[..], long[..k as usize]);
        }
    }
}
