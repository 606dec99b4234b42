//go:build unix

package files

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Claims: an output is this process's alone while it runs, so that two
// runs writing one file (two `train --out run.jsonl` at once) do not lose
// one run's records to the other's: the second is refused before it
// starts, naming the first. A claim is an exclusive flock on a lock file
// of the output's target path in a directory of the user's own
// (lockDir; a lock on the output itself would not survive its atomic
// replacement); the kernel drops it when the process ends, however it
// ends. Claims are a machine's: two machines writing one file of a shared
// file system are not told apart.
var claims struct {
	sync.Mutex
	held map[string]*os.File // by target path
}

// claim takes the output at target (its path after links) for this
// process; a target another process holds is an error naming its pid. A
// machine without a usable lock directory claims nothing.
func claim(target string) error {
	abs, err := filepath.Abs(target)
	if err != nil {
		return nil
	}
	claims.Lock()
	defer claims.Unlock()
	if claims.held == nil {
		claims.held = map[string]*os.File{}
	}
	if _, ok := claims.held[abs]; ok {
		return nil
	}
	dir, ok := lockDir()
	if !ok {
		return nil
	}
	sum := sha256.Sum256([]byte(abs))
	f, err := os.OpenFile(filepath.Join(dir, hex.EncodeToString(sum[:16])+".lock"), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b := make([]byte, 64)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		who := strings.TrimSpace(string(b[:n]))
		if who == "" {
			who = "another"
		}
		return fmt.Errorf("another trainmem run (pid %s) is writing it: wait for it, or give another path", who)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	claims.held[abs] = f
	return nil
}

// lockDir is the directory of this user's claims: $XDG_RUNTIME_DIR's when
// set, else one under the temporary directory; only a directory of this
// user's own that no one else may write, never a link (another user could
// otherwise hold the claims, or point a lock file at a file of this
// user's), else none.
func lockDir() (string, bool) {
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "trainmem-locks-"+strconv.Itoa(os.Getuid()))
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return "", false
	}
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode()&0o077 != 0 {
		return "", false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
		return "", false
	}
	return dir, true
}
