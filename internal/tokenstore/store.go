// Package tokenstore is a durable source of fencing tokens: a high-water
// mark in a file, reserved a block ahead and synced to disk before any
// token of the block is issued, so that a restarted server (after a
// graceful stop or a kill -9) starts above every token it issued before.
// It needs no clock once the file exists.
package tokenstore

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// FileName is the name of the high-water mark file in the data directory.
const FileName = "tokens"

// DefaultBlock is how many tokens one write of the file reserves. A
// restart skips what is left of the block, at most this many tokens; the
// next block is written when half of the current one is used, in the
// background.
const DefaultBlock = 1 << 16

// maxFile bounds how much of the file Open reads.
const maxFile = 4 << 10

// magic is the file's first line; the format is
//
//	baton-tokens 1
//	limit <decimal>
//	crc32 <hex of the IEEE CRC-32 of the limit line, newline included>
//
// where no token at or above limit has been issued.
const magic = "baton-tokens 1\n"

// ErrCorrupt is wrapped by Open's error when the file exists but is not
// a valid high-water mark.
var ErrCorrupt = errors.New("tokenstore: corrupt high-water mark file")

// ErrInUse is wrapped by Open's error when another process (or Store)
// has the directory's tokens open: two sources on one mark would issue
// the same tokens.
var ErrInUse = errors.New("tokenstore: the token file is in use by another process")

// LockName is the lock file beside FileName, held while a Store is open.
const LockName = FileName + ".lock"

// Options configure a Store; the zero value is ready to use.
type Options struct {
	// Block is how many tokens one write reserves; zero means
	// DefaultBlock.
	Block uint64
	// Now is the wall clock, read only when the directory holds no file
	// yet; nil means time.Now.
	Now func() time.Time
	// OnError is told when a background reservation fails; the next
	// grants retry it. May be nil.
	OnError func(error)
	// Fatal is called when the reserved block is used up and a new one
	// cannot be written: issuing a token beyond the durable mark could
	// let a restart go backwards, so the process must not go on. Nil
	// means panic.
	Fatal func(error)
}

// Store is a locktable.TokenSource backed by a file. Next may be called
// from one goroutine at a time (the server calls it under its table
// mutex); Close from any.
type Store struct {
	path  string
	lock  *os.File // flock'd while open; nil where unsupported
	opts  Options
	wmu   sync.Mutex // serializes writes of the file
	mu    sync.Mutex // guards the fields below
	prev  uint64     // last token issued
	limit uint64     // durable: no token >= limit was issued
	// pending is closed when the reservation in flight, if any, ends.
	pending chan struct{}
	err     error // of the last reservation
}

// Open opens (creating if needed) the data directory dir and the token
// file in it, and reserves a first block before returning. With no file
// yet, tokens start above the clock rule of the in-memory mode, (unix
// seconds + 1) << 20, so they continue upward from it. A file that cannot
// be read or parsed is an error: starting low could issue tokens below
// earlier ones.
func Open(dir string, opts Options) (*Store, error) {
	if opts.Block == 0 {
		opts.Block = DefaultBlock
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tokenstore: data directory: %w", err)
	}
	lock, err := lockFile(filepath.Join(dir, LockName))
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Store, error) {
		if lock != nil {
			lock.Close()
		}
		return nil, err
	}
	s := &Store{path: filepath.Join(dir, FileName), lock: lock, opts: opts}
	next, err := s.read()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		sec := opts.Now().Unix()
		if sec < 0 {
			return fail(fmt.Errorf("tokenstore: %s does not exist and the wall clock is before 1970: cannot choose a first token", s.path))
		}
		next = uint64(sec+1) << 20
	case err != nil:
		return fail(err)
	}
	if next == 0 {
		next = 1
	}
	s.prev, s.limit = next-1, next
	if err := s.reserve(next + opts.Block); err != nil {
		return fail(err)
	}
	return s, nil
}

// Path is the file that holds the high-water mark.
func (s *Store) Path() string { return s.path }

// Next returns the next token. It waits for the disk only when the
// reserved block is used up before the background reservation of the
// next one has finished.
func (s *Store) Next() uint64 {
	s.mu.Lock()
	for attempt := 0; s.prev+1 >= s.limit; attempt++ {
		if attempt == 3 {
			err := fmt.Errorf("tokenstore: no durable tokens left and %s cannot be written: %w", s.path, s.err)
			s.mu.Unlock()
			s.fatal(err)
			s.mu.Lock()
			continue // Fatal returned: keep trying
		}
		if s.pending == nil {
			s.startReserve()
		}
		ch := s.pending
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
	}
	s.prev++
	if s.limit-s.prev <= s.opts.Block/2 && s.pending == nil {
		s.startReserve()
	}
	tok := s.prev
	s.mu.Unlock()
	return tok
}

// Close waits for a reservation in flight and releases the directory.
// The Store must not be used afterwards.
func (s *Store) Close() error {
	s.mu.Lock()
	ch := s.pending
	s.mu.Unlock()
	if ch != nil {
		<-ch
	}
	if s.lock != nil {
		return s.lock.Close()
	}
	return nil
}

func (s *Store) fatal(err error) {
	if s.opts.Fatal != nil {
		s.opts.Fatal(err)
		return
	}
	panic(err)
}

// startReserve writes limit + Block in the background. Called with s.mu.
func (s *Store) startReserve() {
	target := s.limit + s.opts.Block
	ch := make(chan struct{})
	s.pending = ch
	go func() {
		err := s.reserve(target)
		if err != nil && s.opts.OnError != nil {
			s.opts.OnError(err)
		}
		s.mu.Lock()
		s.err = err
		s.pending = nil
		s.mu.Unlock()
		close(ch)
	}()
}

// reserve makes limit durable, then lets Next issue tokens below it.
func (s *Store) reserve(limit uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := writeDurably(s.path, encode(limit)); err != nil {
		return fmt.Errorf("tokenstore: reserving tokens: %w", err)
	}
	s.mu.Lock()
	s.limit = max(s.limit, limit)
	s.mu.Unlock()
	return nil
}

func encode(limit uint64) []byte {
	line := "limit " + strconv.FormatUint(limit, 10) + "\n"
	return fmt.Appendf(nil, "%s%scrc32 %08x\n", magic, line, crc32.ChecksumIEEE([]byte(line)))
}

// read returns the limit in the file.
func (s *Store) read() (uint64, error) {
	f, err := os.Open(s.path)
	if err != nil {
		return 0, fmt.Errorf("tokenstore: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return 0, fmt.Errorf("tokenstore: reading %s: %w", s.path, err)
	}
	limit, err := decode(b)
	if err != nil {
		return 0, fmt.Errorf("%w %s: %v; refusing to start, since tokens could go backwards (restore the file, or remove it only if no server has issued tokens from this directory)", ErrCorrupt, s.path, err)
	}
	return limit, nil
}

func decode(b []byte) (uint64, error) {
	if len(b) > maxFile {
		return 0, errors.New("too large")
	}
	rest, ok := bytes.CutPrefix(b, []byte(magic))
	if !ok {
		return 0, errors.New("no baton-tokens header")
	}
	line, rest, ok := bytes.Cut(rest, []byte("\n"))
	if !ok {
		return 0, errors.New("truncated")
	}
	num, ok := bytes.CutPrefix(line, []byte("limit "))
	if !ok {
		return 0, errors.New("no limit line")
	}
	limit, err := strconv.ParseUint(string(num), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("limit: %v", err)
	}
	want := fmt.Sprintf("crc32 %08x\n", crc32.ChecksumIEEE(append(line, '\n')))
	if string(rest) != want {
		return 0, errors.New("checksum mismatch or trailing data")
	}
	return limit, nil
}

// writeDurably replaces path with data so that after a crash the file
// holds either the old or the new content, and the new content once it
// returns: write a temporary file, sync it, rename it over path, sync the
// directory.
func writeDurably(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
