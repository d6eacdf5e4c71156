package corefile

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

func cmVolume(name, cm string, items ...string) corev1.Volume {
	v := corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}
	for i := 0; i+1 < len(items); i += 2 {
		v.ConfigMap.Items = append(v.ConfigMap.Items, corev1.KeyToPath{Key: items[i], Path: items[i+1]})
	}
	return v
}

// TestSourceOf finds the ConfigMap and key of the Corefile in the layouts
// of kubeadm (volume config-volume, items), k3s (Corefile and NodeHosts
// projected, a second volume for custom files below the first mount), and
// one with volume config and no items.
func TestSourceOf(t *testing.T) {
	kubeadm := corev1.PodSpec{
		Containers: []corev1.Container{{Name: "coredns", Args: []string{"-conf", "/etc/coredns/Corefile"},
			VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}}}},
		Volumes: []corev1.Volume{cmVolume("config-volume", "coredns", "Corefile", "Corefile")},
	}
	s, err := SourceOf(kubeadm, "")
	require.NoError(t, err)
	assert.Equal(t, Source{ConfigMap: "coredns", Key: "Corefile", Volume: "config-volume", Path: "/etc/coredns/Corefile"}, s)

	k3s := corev1.PodSpec{
		Containers: []corev1.Container{{Name: "coredns", Args: []string{"-conf", "/etc/coredns/Corefile"},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true},
				{Name: "custom-config-volume", MountPath: "/etc/coredns/custom", ReadOnly: true}}}},
		Volumes: []corev1.Volume{
			cmVolume("config-volume", "coredns", "Corefile", "Corefile", "NodeHosts", "NodeHosts"),
			cmVolume("custom-config-volume", "coredns-custom")},
	}
	s, err = SourceOf(k3s, "coredns")
	require.NoError(t, err)
	assert.Equal(t, Source{ConfigMap: "coredns", Key: "Corefile", Volume: "config-volume", Path: "/etc/coredns/Corefile"}, s)

	other := corev1.PodSpec{
		Containers: []corev1.Container{{Name: "sidecar"}, {Name: "dns", Args: []string{"-conf=/etc/dns/Corefile"},
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/dns/"}}}},
		Volumes: []corev1.Volume{cmVolume("config", "dns-config")},
	}
	s, err = SourceOf(other, "dns")
	require.NoError(t, err)
	assert.Equal(t, Source{ConfigMap: "dns-config", Key: "Corefile", Volume: "config", Path: "/etc/dns/Corefile"}, s)

	for _, c := range []struct {
		spec      corev1.PodSpec
		container string
		want      string
	}{
		{kubeadm, "dns", `no container "dns"`},
		{corev1.PodSpec{Containers: []corev1.Container{{Name: "coredns", Args: []string{"-conf", "/etc/other/Corefile"},
			VolumeMounts: kubeadm.Containers[0].VolumeMounts}}, Volumes: kubeadm.Volumes}, "",
			"reads its Corefile from /etc/other/Corefile, which no volume mount of it"},
		{corev1.PodSpec{Containers: kubeadm.Containers, Volumes: []corev1.Volume{{Name: "config-volume"}}}, "", "not a configMap volume"},
		{corev1.PodSpec{Containers: kubeadm.Containers, Volumes: []corev1.Volume{cmVolume("config-volume", "coredns", "Other", "Other")}}, "",
			"whose items project no key to Corefile"},
	} {
		_, err := SourceOf(c.spec, c.container)
		assert.ErrorContains(t, err, c.want)
	}
}
