package proc

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// Fetch writes what url answers to the file path: a profile of a process
// under measurement, say (its pprof endpoint). Anything but 200 OK is an
// error, with the start of the body.
func Fetch(url, path string) error {
	resp, err := (&http.Client{Timeout: time.Minute}).Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
