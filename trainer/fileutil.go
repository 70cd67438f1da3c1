package trainer

import (
	"os"

	"github.com/lanpo-rl/lanpo/internal/fsutil"
)

// writeFileSync writes a file and fsyncs it (the checkpoint's directory is
// renamed into place afterwards, so the file need not be atomic itself).
func writeFileSync(path string, data []byte) error { return fsutil.WriteFileSync(path, data) }

// syncDir fsyncs a directory so a rename inside it is durable.
func syncDir(dir string) error { return fsutil.SyncDir(dir) }

// copyFile copies src to dst (tokenizer files into a checkpoint).
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return writeFileSync(dst, b)
}
