// Package rangelock is baton's table of POSIX advisory locks: fcntl
// byte-range locks and flock whole-file locks, per key (a file) and
// namespace, with strict FIFO queues, push grants, fencing tokens and
// deadlock detection. Like package locktable it is pure, and returns its
// effects as data (a Result). Its semantics are Linux's (OFD and POSIX
// locks, flock), pinned by a differential test against the kernel
// (kernel_test.go). A Table is not safe for concurrent use.
// User docs: docs/posix-locks.md; semantics, fairness, deadlock, limits
// and cost: docs/design/2026-12-07-range-locks.md#internalrangelockdocgo.
package rangelock
