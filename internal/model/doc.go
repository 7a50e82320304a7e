// Package model holds models of lockedjob's lock protocol and an explicit-state checker that
// explores every state they can reach, so that a property is checked in every interleaving of the
// model's atomic steps, not only in those a test happens to sample. The models are small on
// purpose (two clients, a few attempts, a few clock ticks): exhaustive within those bounds, and
// each bound is named where it is set. docs/model.md says what is modelled, what is abstracted and
// why, and what the checker finds when a fixed defect is put back (the mutations).
//
// The package imports nothing of the product: a model restates the Lua scripts' atomic steps and
// the client's decisions in its own terms, and its tests are the proof, not the product's.
package model
