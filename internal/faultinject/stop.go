//go:build linux

package faultinject

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Freeze sends SIGSTOP to pid and returns once every thread of the
// process has stopped. kill(2) returns before that: a thread running on
// another CPU goes on for a moment, long enough to read a pipe and send a
// write, so whoever depends on the process being frozen must wait.
func Freeze(pid int, limit time.Duration) error {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	deadline := time.Now().Add(limit)
	for {
		running, err := runningThreads(pid)
		if err != nil {
			return err
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d: %d threads still not stopped %v after SIGSTOP", pid, running, limit)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// runningThreads counts the threads of pid not in state T (stopped).
func runningThreads(pid int) (int, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("process %d: no threads in /proc: %v", pid, err)
	}
	n := 0
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited
		}
		// "pid (comm) S ...": the state follows the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			n++
		}
	}
	return n, nil
}
