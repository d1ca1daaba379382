// Package explore holds the interleaving explorer of the write path. Its
// test drives the writers of one partition through forced orders of their
// fault points on the real stores: a member that lost the partition and
// writes on (the late writer), the partition's new owner, and a repair.
// For every pair of their fault points, in both orders, it checks each
// store against one clean delivery of the same log. The orders are forced
// by holding a writer at a fault point until the other has reached its
// own, never by sleeping. docs/write-order.md says what each case shows.
package explore
