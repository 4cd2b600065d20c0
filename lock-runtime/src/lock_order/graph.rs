//! The class graph of the lock-order check: an edge `A → B` for every class `B` a task took
//! while it held class `A`, with the call sites that first showed it. A new edge that closes
//! a cycle is an inversion.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::call_site::CallSite;

/// One order seen: `from` held (taken at `held_at`) while `to` was taken (at `taken_at`).
#[derive(Debug, Clone)]
pub(crate) struct Edge {
    pub(crate) from: Arc<str>,
    pub(crate) held_at: CallSite,
    pub(crate) to: Arc<str>,
    pub(crate) taken_at: CallSite,
}

/// Every order seen so far, by class.
#[derive(Debug, Default)]
pub(crate) struct Graph {
    /// Each class's index.
    classes: HashMap<Arc<str>, usize>,
    /// The edges out of each class (by index), to a class index.
    out: Vec<Vec<(usize, Edge)>>,
}

impl Graph {
    /// Records `edge`. When it is new and closes a cycle, the edges of that cycle: the new
    /// one first, then the earlier ones from its `to` back to its `from`. An edge seen
    /// before adds nothing and reports nothing (each inversion is reported once).
    pub(crate) fn add(&mut self, edge: Edge) -> Option<Vec<Edge>> {
        let from = self.index(&edge.from);
        let to = self.index(&edge.to);
        if from == to || self.out[from].iter().any(|(next, _)| *next == to) {
            return None;
        }
        let path = self.path(to, from);
        self.out[from].push((to, edge.clone()));
        let mut cycle = path?;
        cycle.insert(0, edge);
        Some(cycle)
    }

    fn index(&mut self, class: &Arc<str>) -> usize {
        if let Some(&index) = self.classes.get(class) {
            return index;
        }
        let index = self.out.len();
        self.classes.insert(class.clone(), index);
        self.out.push(Vec::new());
        index
    }

    /// The edges of a shortest path from `start` to `goal`, if there is one (breadth first).
    fn path(&self, start: usize, goal: usize) -> Option<Vec<Edge>> {
        let mut came_by: Vec<Option<(usize, usize)>> = vec![None; self.out.len()];
        let mut seen = vec![false; self.out.len()];
        let mut queue = VecDeque::from([start]);
        seen[start] = true;
        while let Some(at) = queue.pop_front() {
            if at == goal {
                return Some(self.walk_back(&came_by, goal));
            }
            for (slot, (next, _)) in self.out[at].iter().enumerate() {
                if !seen[*next] {
                    seen[*next] = true;
                    came_by[*next] = Some((at, slot));
                    queue.push_back(*next);
                }
            }
        }
        None
    }

    /// The edges that led to `goal`, in order from the search's start.
    fn walk_back(&self, came_by: &[Option<(usize, usize)>], goal: usize) -> Vec<Edge> {
        let mut edges = Vec::new();
        let mut at = goal;
        while let Some((from, slot)) = came_by[at] {
            edges.push(self.out[from][slot].1.clone());
            at = from;
        }
        edges.reverse();
        edges
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(from: &str, to: &str) -> Edge {
        let site = CallSite::at("here.rs", 1);
        Edge {
            from: from.into(),
            held_at: site,
            to: to.into(),
            taken_at: site,
        }
    }

    fn classes(cycle: &[Edge]) -> Vec<(String, String)> {
        (cycle.iter())
            .map(|edge| (edge.from.to_string(), edge.to.to_string()))
            .collect()
    }

    #[test]
    fn the_reverse_of_an_order_seen_closes_a_cycle_once() {
        let mut graph = Graph::default();
        assert!(graph.add(edge("a", "b")).is_none());
        let cycle = graph.add(edge("b", "a")).expect("an inversion");
        assert_eq!(
            classes(&cycle),
            [("b".into(), "a".into()), ("a".into(), "b".into())]
        );
        assert!(graph.add(edge("b", "a")).is_none(), "reported once");
    }

    #[test]
    fn a_cycle_through_three_classes_is_found_at_its_last_edge() {
        let mut graph = Graph::default();
        assert!(graph.add(edge("a", "b")).is_none());
        assert!(graph.add(edge("b", "c")).is_none());
        let cycle = graph.add(edge("c", "a")).expect("an inversion");
        assert_eq!(cycle.len(), 3);
        assert_eq!(cycle[1].from.as_ref(), "a");
        assert_eq!(cycle[2].to.as_ref(), "c");
    }

    #[test]
    fn one_order_and_one_class_never_close_a_cycle() {
        let mut graph = Graph::default();
        for (from, to) in [("a", "b"), ("b", "c"), ("a", "c"), ("a", "a"), ("a", "b")] {
            assert!(graph.add(edge(from, to)).is_none(), "{from} → {to}");
        }
    }
}
