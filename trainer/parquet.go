package trainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/parquet-go/parquet-go"
)

// parquetRows calls fn with every row of a Parquet file as a JSON object
// (nested groups as objects, lists as arrays), numbered from 1: the
// records go through the same key mapping as JSONL lines (ReadProblems).
func parquetRows(path string, fn func(n int, line []byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := parquet.NewReader(f)
	defer r.Close()
	for n := 1; ; n++ {
		row := map[string]any{}
		if err := r.Read(&row); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%s row %d: %w", path, n, err)
		}
		b, err := json.Marshal(row)
		if err != nil {
			return fmt.Errorf("%s row %d: %w", path, n, err)
		}
		if err := fn(n, b); err != nil {
			return err
		}
	}
}
