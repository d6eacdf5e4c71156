package harness

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Images are the images a real node runs, built here by test/tools/image.sh
// (`make image`) and imported into every node's containerd: nothing is
// pulled.
type Images struct {
	// CorednsMC is the project's image, built from the Dockerfile.
	CorednsMC string
	// Pause is the pod sandbox image containerd is configured with.
	Pause string
	// Busybox is a small workload image: Debian's busybox-static, for
	// servers (httpd, nc) and clients (wget, nslookup) in pods.
	Busybox string
	// Archives are the OCI archives the images come from.
	Archives []string
}

var (
	imagesOnce sync.Once
	images     *Images
	imagesErr  error
)

// LocalImages returns the images real nodes run. They come from the
// directory $MCMIRROR_IMAGES when set; otherwise test/tools/image.sh builds
// them (once; it caches them outside the work tree).
func LocalImages() (*Images, error) {
	imagesOnce.Do(func() { images, imagesErr = loadImages() })
	return images, imagesErr
}

func loadImages() (*Images, error) {
	dir := os.Getenv("MCMIRROR_IMAGES")
	if dir == "" {
		var err error
		if dir, err = runTool("image.sh"); err != nil {
			return nil, err
		}
	}
	f, err := os.Open(filepath.Join(dir, "images.env"))
	if err != nil {
		return nil, fmt.Errorf("harness: images: %w (run test/tools/image.sh)", err)
	}
	defer f.Close()
	vars := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "="); ok {
			vars[k] = v
		}
	}
	im := &Images{CorednsMC: vars["COREDNS_MC_IMAGE"], Pause: vars["PAUSE_IMAGE"], Busybox: vars["BUSYBOX_IMAGE"]}
	if im.CorednsMC == "" || im.Pause == "" || im.Busybox == "" {
		return nil, fmt.Errorf("harness: %s: COREDNS_MC_IMAGE, PAUSE_IMAGE and BUSYBOX_IMAGE must all be set", f.Name())
	}
	for _, a := range []string{"coredns-mc.oci.tar", "pause.oci.tar", "busybox.oci.tar"} {
		p := filepath.Join(dir, a)
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("harness: images: %w", err)
		}
		im.Archives = append(im.Archives, p)
	}
	return im, nil
}
