package corefile

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// DefaultConf is where CoreDNS reads its Corefile when no -conf is given
// (in its image's working directory /: the file Corefile).
const DefaultConf = "Corefile"

// Source is where a CoreDNS pod template reads its Corefile from: a key of
// a ConfigMap, through a configMap volume mounted in the container.
type Source struct {
	ConfigMap, Key string
	// Volume is the volume's name; Path is the file CoreDNS is told to
	// read (-conf).
	Volume, Path string
}

// SourceOf finds, in a CoreDNS pod template, the ConfigMap and key the
// container named container (empty: the first) reads its Corefile from:
// its -conf argument, the volume mounted at the longest prefix of it, and
// that volume's ConfigMap and the key projected to the file (the file's
// own name when the volume has no items). It refuses a Corefile that does
// not come from a ConfigMap, saying where it comes from instead.
func SourceOf(spec corev1.PodSpec, container string) (Source, error) {
	ci := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return container == "" || c.Name == container })
	if ci < 0 {
		return Source{}, fmt.Errorf("no container %q", container)
	}
	c := &spec.Containers[ci]
	conf := DefaultConf
	args := slices.Concat(c.Command, c.Args)
	for i, a := range args {
		switch {
		case (a == "-conf" || a == "--conf") && i+1 < len(args):
			conf = args[i+1]
		case strings.HasPrefix(a, "-conf="), strings.HasPrefix(a, "--conf="):
			_, conf, _ = strings.Cut(a, "=")
		}
	}
	if !path.IsAbs(conf) {
		conf = path.Join(cmp.Or(c.WorkingDir, "/"), conf)
	}
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		mp := strings.TrimSuffix(m.MountPath, "/")
		if m.SubPath == "" && strings.HasPrefix(conf, mp+"/") && (mount == nil || len(mp) > len(strings.TrimSuffix(mount.MountPath, "/"))) {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		return Source{}, fmt.Errorf("container %s reads its Corefile from %s, which no volume mount of it (a whole volume, no subPath) holds", c.Name, conf)
	}
	file := strings.TrimPrefix(conf, strings.TrimSuffix(mount.MountPath, "/")+"/")
	for _, v := range spec.Volumes {
		if v.Name != mount.Name {
			continue
		}
		if v.ConfigMap == nil {
			return Source{}, fmt.Errorf("container %s reads its Corefile %s from volume %s, which is not a configMap volume", c.Name, conf, v.Name)
		}
		s := Source{ConfigMap: v.ConfigMap.Name, Volume: v.Name, Path: conf}
		if len(v.ConfigMap.Items) == 0 {
			s.Key = file
			return s, nil
		}
		if i := slices.IndexFunc(v.ConfigMap.Items, func(it corev1.KeyToPath) bool { return it.Path == file }); i >= 0 {
			s.Key = v.ConfigMap.Items[i].Key
			return s, nil
		}
		return Source{}, fmt.Errorf("container %s reads its Corefile %s from volume %s, whose items project no key to %s", c.Name, conf, v.Name, file)
	}
	return Source{}, fmt.Errorf("container %s mounts volume %s, which the pod does not have", c.Name, mount.Name)
}
