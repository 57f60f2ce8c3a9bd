//! Gaussian elimination over GF(2^8), one combination at a time.
//!
//! Rows are kept in reduced row-echelon form, indexed by their pivot column, so every insert
//! tells at once whether the combination was innovative, and a full-rank decoder holds the
//! identity matrix beside the source symbols. Cost per insert: O(n · (n + L)).

use crate::gf;

#[derive(Debug, Clone)]
struct Row {
    coeffs: Vec<u8>,
    payload: Vec<u8>,
}

impl Row {
    /// `self ^= c · other`.
    fn axpy(&mut self, c: u8, other: &Row) {
        gf::axpy(c, &other.coeffs, &mut self.coeffs);
        gf::axpy(c, &other.payload, &mut self.payload);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Insert {
    /// Raised the rank.
    Innovative,
    /// A combination of what the decoder already had.
    NonInnovative,
    /// Coefficient count or payload length differ from the cohort's.
    Mismatch,
}

#[derive(Debug, Clone)]
pub struct Decoder {
    n: usize,
    symbol_len: usize,
    /// `rows[p]` has pivot `p` (coefficient 1) and zeros in every other pivot column.
    rows: Vec<Option<Row>>,
    rank: usize,
}

impl Decoder {
    pub fn new(n: usize, symbol_len: usize) -> Decoder {
        Decoder {
            n,
            symbol_len,
            rows: vec![None; n],
            rank: 0,
        }
    }

    pub fn cohort_size(&self) -> usize {
        self.n
    }

    pub fn symbol_len(&self) -> usize {
        self.symbol_len
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn is_complete(&self) -> bool {
        self.rank == self.n
    }

    pub fn insert(&mut self, coeffs: &[u8], payload: &[u8]) -> Insert {
        if coeffs.len() != self.n || payload.len() != self.symbol_len {
            return Insert::Mismatch;
        }
        let mut new = Row {
            coeffs: coeffs.to_vec(),
            payload: payload.to_vec(),
        };
        // Row p has 1 in column p and 0 in every other pivot column, so subtracting c · row p
        // leaves the new row's other pivot entries as they were: every multiplier is read from
        // the incoming coefficients, and the whole reduction is one combination, which the row
        // kernel does in one pass over the new row. (Deferring all payload work to full rank
        // measured no faster and would stall the device for the whole n² · L at once.)
        let mut mult = Vec::with_capacity(self.rank);
        let mut coeff_rows = Vec::with_capacity(self.rank);
        let mut payload_rows = Vec::with_capacity(self.rank);
        for (row, &c) in self.rows.iter().zip(coeffs) {
            if let (Some(row), true) = (row, c != 0) {
                mult.push(c);
                coeff_rows.push(row.coeffs.as_slice());
                payload_rows.push(row.payload.as_slice());
            }
        }
        gf::combine_into(&mult, &coeff_rows, &mut new.coeffs);
        gf::combine_into(&mult, &payload_rows, &mut new.payload);
        let Some(pivot) = new.coeffs.iter().position(|&c| c != 0) else {
            return Insert::NonInnovative;
        };
        // Non-zero, so it has an inverse.
        let Some(inv) = gf::inv(new.coeffs[pivot]) else {
            return Insert::NonInnovative;
        };
        gf::scale(inv, &mut new.coeffs);
        gf::scale(inv, &mut new.payload);
        for row in self.rows.iter_mut().flatten() {
            let c = row.coeffs[pivot];
            if c != 0 {
                row.axpy(c, &new);
            }
        }
        self.rows[pivot] = Some(new);
        self.rank += 1;
        Insert::Innovative
    }

    /// The source symbols in order, once the rank is full.
    pub fn into_symbols(self) -> Option<Vec<Vec<u8>>> {
        if !self.is_complete() {
            return None;
        }
        self.rows.into_iter().map(|r| r.map(|r| r.payload)).collect()
    }
}
