//! Tests of the automata layer that reach across modules (and into the front ends for inputs).

mod counters;
mod recursion;
mod rules;
mod shared_parts;
mod stack;
