package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockStateDir takes an exclusive lock on the state dir for the life of this
// process, waiting up to timeout for a previous `up` that is still stopping
// (its parent was killed a moment ago): two control planes on one state dir
// would fight over etcd's data and ports. The lock lasts until the returned
// file is closed (or garbage-collected: keep it) or the process exits.
func lockStateDir(dir string, timeout time.Duration) (*os.File, error) {
	path := filepath.Join(dir, "lock")
	// Opened close-on-exec: the components must not hold the lock after up dies.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for waiting := false; ; waiting = true {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another vkvm-cluster up still runs on %s after %s (lock %s)", dir, timeout, path)
		}
		if !waiting {
			logf("another vkvm-cluster up runs on %s; waiting for it to stop", dir)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ownFiles are what up keeps in its state dir; only they are restricted, in
// case the state dir also holds someone else's files.
var ownFiles = []string{"pki", "etcd", "logs", "lock", "kubeconfig", "admin.kubeconfig", "controller-manager.kubeconfig", "scheduler.kubeconfig"}

// restrictModes makes dir and every directory of up's below it 0700, and
// every file 0600.
func restrictModes(dir string) error {
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	for _, name := range ownFiles {
		if err := restrictTree(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

func restrictTree(root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		} else if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil || info.Mode().Perm() == want {
			return err
		}
		return os.Chmod(path, want)
	})
}
