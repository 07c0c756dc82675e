//! What each DMA of a device is for, keyed by its [`DmaId`].

use crate::model::DmaId;
use std::collections::VecDeque;

/// What each DMA in flight is for. A device's DMA numbers are handed out in order and
/// its DMAs finish roughly in order, so a window from the oldest unfinished one is a
/// cheap map (no hashing on the per-DMA path).
#[derive(Debug)]
pub(crate) struct OpTable<T> {
    base: u64,
    ops: VecDeque<Option<T>>,
}

impl<T> Default for OpTable<T> {
    fn default() -> Self {
        OpTable {
            base: 0,
            ops: VecDeque::new(),
        }
    }
}

impl<T> OpTable<T> {
    pub(crate) fn insert(&mut self, id: DmaId, op: T) {
        if self.ops.is_empty() {
            self.base = id.0;
        }
        let Some(at) = id.0.checked_sub(self.base) else {
            return; // numbers only grow; an older one cannot be new
        };
        let at = at as usize;
        if at == self.ops.len() {
            // The usual case: the next number.
            self.ops.push_back(Some(op));
            return;
        }
        if at > self.ops.len() {
            self.ops.resize_with(at + 1, || None);
        }
        self.ops[at] = Some(op);
    }

    pub(crate) fn remove(&mut self, id: &DmaId) -> Option<T> {
        let at = id.0.checked_sub(self.base)? as usize;
        let op = self.ops.get_mut(at)?.take();
        while let Some(None) = self.ops.front() {
            self.ops.pop_front();
            self.base += 1;
        }
        op
    }

    /// Forgets the DMAs for which `gone` is true (their hosts dropped them: no
    /// `dma_done` will come).
    pub(crate) fn forget(&mut self, mut gone: impl FnMut(&T) -> bool) {
        for o in self.ops.iter_mut() {
            if o.as_ref().is_some_and(&mut gone) {
                *o = None;
            }
        }
        while let Some(None) = self.ops.front() {
            self.ops.pop_front();
            self.base += 1;
        }
    }

    /// DMAs in flight.
    pub(crate) fn len(&self) -> usize {
        self.ops.iter().filter(|o| o.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_was_inserted_in_any_finishing_order() {
        let mut t = OpTable::default();
        for i in 10..20 {
            t.insert(DmaId(i), i * 2);
        }
        assert_eq!(t.remove(&DmaId(15)), Some(30));
        assert_eq!(t.remove(&DmaId(15)), None);
        assert_eq!(t.remove(&DmaId(10)), Some(20));
        assert_eq!(t.remove(&DmaId(9)), None);
        assert_eq!(t.len(), 8);
        for i in (11..20).rev() {
            assert_eq!(t.remove(&DmaId(i)), (i != 15).then_some(i * 2));
        }
        assert_eq!(t.len(), 0);
        assert_eq!(t.remove(&DmaId(25)), None);
    }

    #[test]
    fn numbers_may_skip() {
        let mut t = OpTable::default();
        t.insert(DmaId(1), 'a');
        t.insert(DmaId(5), 'b'); // 2..=4 went to other tables, or were never used
        t.insert(DmaId(6), 'c');
        assert_eq!(t.len(), 3);
        assert_eq!(t.remove(&DmaId(3)), None);
        assert_eq!(t.remove(&DmaId(5)), Some('b'));
        assert_eq!(t.remove(&DmaId(1)), Some('a'));
        assert_eq!(t.remove(&DmaId(6)), Some('c'));
        assert_eq!(t.len(), 0);
    }
}
