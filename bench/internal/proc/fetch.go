package proc

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
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

var reMemStat = regexp.MustCompile(`(?m)^# (HeapInuse|HeapAlloc) = (\d+)$`)

// HeapStats forces a GC through the Go pprof endpoint base (…/debug/pprof)
// and returns the runtime's HeapInuse and HeapAlloc after it.
func HeapStats(base string, timeout time.Duration) (inuse, alloc int64, err error) {
	resp, err := (&http.Client{Timeout: timeout}).Get(base + "/heap?gc=1&debug=1")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	for _, m := range reMemStat.FindAllSubmatch(body, -1) {
		n, _ := strconv.ParseInt(string(m[2]), 10, 64)
		if string(m[1]) == "HeapInuse" {
			inuse = n
		} else {
			alloc = n
		}
	}
	if inuse == 0 || alloc == 0 {
		return 0, 0, fmt.Errorf("%s: no MemStats in the heap profile", base)
	}
	return inuse, alloc, nil
}

// Top is `go tool pprof -top` of the profile at path, of binary bin, with
// args; its error says "pprof failed" with pprof's output.
func Top(bin, path string, args ...string) (string, error) {
	args = append(append([]string{"tool", "pprof", "-top"}, args...), bin, path)
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("pprof failed: %v: %s", err, out)
	}
	return string(out), nil
}

// Table drops the lines of a Top before its table.
func Table(top string) string {
	if i := strings.Index(top, "      flat"); i >= 0 {
		return top[i:]
	}
	return top
}
