package check

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/fleet"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/peers"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	east  = fleet.Member{Context: "east", Name: "east"}
	west  = fleet.Member{Context: "kind-west", Name: "west"}
	paris = fleet.Member{Context: "paris", Name: "paris"}
)

// healthySource is a source whose link Secrets for targets work and whose
// two DNS replicas have synced each, the last one heard 3 s ago.
func healthySource(local string, targets ...string) *MemberFacts {
	m := &MemberFacts{Now: now, Server: "https://" + local + ":6443",
		Links: LinkFacts{Namespace: "mcmirror-links", Configured: true, Local: local},
		DNS:   DNSLinks{Deployment: "kube-system/coredns"}}
	for _, t := range targets {
		m.Links.Secrets = append(m.Links.Secrets, LinkSecret{Name: "cluster-credentials-" + t, Cluster: t, Server: "https://" + t + ":6443"})
	}
	for _, pod := range []string{"kube-system/coredns-a", "kube-system/coredns-b"} {
		r := DNSReplica{Pod: pod, Links: map[string]ReplicaLink{}}
		for i, t := range targets {
			r.Links[t] = ReplicaLink{Synced: true, Up: true, LastSeen: now.Add(-time.Duration(i+1) * time.Second)}
		}
		m.DNS.Replicas = append(m.DNS.Replicas, r)
	}
	return m
}

func TestEvaluateFleetHealthy(t *testing.T) {
	got := EvaluateFleet([]fleet.Pair{{Source: east, Target: west}, {Source: east, Target: paris}}, map[string]*MemberFacts{"east": healthySource("east", "west", "paris")})
	require.Len(t, got, 2)
	assert.Equal(t, PairCheck{Source: "east", Target: "west", Status: OK, Linked: "yes", Synced: "2/2", LastChange: "1s ago", Gateway: "-"}, got[0])
	assert.Equal(t, PairCheck{Source: "east", Target: "paris", Status: OK, Linked: "yes", Synced: "2/2", LastChange: "2s ago", Gateway: "-"}, got[1])
}

// Each way a pair goes wrong is named in its row, with the problem and its
// fix under the table.
func TestEvaluateFleetProblems(t *testing.T) {
	pair := fleet.Pair{Source: east, Target: west}
	for _, c := range []struct {
		name   string
		edit   func(m *MemberFacts)
		status Status
		cells  [4]string // linked, synced, last change, gateway
		id     string
		msg    string
		fix    string
	}{
		{"source API server down", func(m *MemberFacts) {
			*m = MemberFacts{Server: "https://east:6443", APIErr: "unreachable: connection refused"}
		},
			Fail, [4]string{"?", "?", "-", "?"}, "api",
			"the API server of east (https://east:6443) does not answer: unreachable: connection refused", "kubectl --context east cluster-info"},
		{"no link Secret", func(m *MemberFacts) {
			m.Links.Secrets = nil
			m.DNS.Replicas[0].Links, m.DNS.Replicas[1].Links = nil, nil
		},
			Fail, [4]string{"no", "0/2", "-", "-"}, "linked",
			"east has no link Secret for west in mcmirror-links: its DNS does not answer west's names",
			"coredns-mc link --context kind-west --cluster west --source-context east --source-cluster east"},
		{"target API server down", func(m *MemberFacts) {
			m.Links.Secrets[0].ProbeErr, m.Links.Secrets[0].ProbeReason = "unreachable: connection refused", link.FailureUnreachable
		}, Fail, [4]string{"failing", "2/2", "1s ago", "-"}, "linked",
			"Secret mcmirror-links/cluster-credentials-west: https://west:6443 answers unreachable: unreachable: connection refused",
			"check that https://west:6443 is up and reachable"},
		{"refused by policy", func(m *MemberFacts) {
			m.Links.Secrets[0].Refused, m.Links.Secrets[0].Reason = "its kubeconfig runs a command (exec)", link.ReasonExec
		}, Fail, [4]string{"refused", "2/2", "1s ago", "-"}, "linked", "is refused (exec)", "--allow-insecure-kubeconfig"},
		{"not tried from here", func(m *MemberFacts) { m.Links.Secrets[0].NotProbed = "its kubeconfig runs a command" },
			Warn, [4]string{"untested", "2/2", "1s ago", "-"}, "linked", "not tried from here", "kubectl --kubeconfig"},
		{"a link of the source itself", func(m *MemberFacts) { m.Links.Local = "west" },
			Fail, [4]string{"refused", "2/2", "1s ago", "-"}, "linked", `links "west", which is this cluster's own name`, "a cluster does not link itself"},
		{"token may not watch", func(m *MemberFacts) { m.Links.Secrets[0].Denied = []string{"watch services"} },
			Fail, [4]string{"denied", "2/2", "1s ago", "-"}, "linked", "its token may not watch services", "deploy/remote-link.yaml"},
		{"link Secrets unreadable", func(m *MemberFacts) { m.Links.Err = "forbidden: nope" },
			Warn, [4]string{"?", "2/2", "1s ago", "-"}, "linked", "could not list the link Secrets of east in mcmirror-links: forbidden: nope", "may list secrets"},
		{"nothing reads link Secrets", func(m *MemberFacts) { m.Links = LinkFacts{Namespace: "mcmirror-links"} },
			Fail, [4]string{"no", "2/2", "1s ago", "-"}, "linked", "no part of east reads link Secrets", "install mcmirror in east"},
		{"one replica down", func(m *MemberFacts) {
			m.DNS.Replicas[1].Links["west"] = ReplicaLink{Synced: true, Up: false, LastSeen: now.Add(-42 * time.Second)}
		}, Fail, [4]string{"yes", "1/2", "42s ago", "-"}, "synced",
			"pod kube-system/coredns-b's link to west is down, serving its last known state (last heard 42s ago)", "logs <pod> | grep west"},
		{"not synced yet", func(m *MemberFacts) { m.DNS.Replicas[0].Links["west"] = ReplicaLink{} },
			Fail, [4]string{"yes", "1/2", "1s ago", "-"}, "synced", "pod kube-system/coredns-a has not synced west yet", "coredns-mc check --context east"},
		{"withdrawn", func(m *MemberFacts) {
			m.DNS.Replicas[0].Links["west"] = ReplicaLink{Synced: true, Withdrawn: true, LastSeen: now.Add(-2 * time.Hour)}
		}, Fail, [4]string{"yes", "1/2", "2h0m0s ago", "-"}, "synced", "has withdrawn west's names: its link failed for longer than stale_max_age", ""},
		{"a replica that does not link", func(m *MemberFacts) { delete(m.DNS.Replicas[0].Links, "west") },
			Fail, [4]string{"yes", "1/2", "1s ago", "-"}, "synced", "pod kube-system/coredns-a does not link west", ""},
		{"no DNS pod runs", func(m *MemberFacts) { m.DNS.Replicas = nil },
			Fail, [4]string{"yes", "0/0", "-", "-"}, "synced", "no pod of kube-system/coredns runs in east: nothing answers west's names there",
			"kubectl --context east -n kube-system describe deployment coredns"},
		{"metrics unreadable", func(m *MemberFacts) {
			m.DNS.Replicas[1] = DNSReplica{Pod: "kube-system/coredns-b", Err: "/metrics: forbidden"}
		},
			Warn, [4]string{"yes", "1/2", "1s ago", "-"}, "synced", "could not read the metrics of pod kube-system/coredns-b: /metrics: forbidden", "get pods/proxy"},
		{"DNS without mcmirror", func(m *MemberFacts) {
			m.DNS = DNSLinks{Deployment: "kube-system/coredns", Unread: "the Corefile has no mcmirror block"}
		},
			Warn, [4]string{"yes", "-", "-", "-"}, "synced", "not read: the Corefile has no mcmirror block", ""},
		{"pods unlisted", func(m *MemberFacts) { m.DNS = DNSLinks{Deployment: "kube-system/coredns", PodsErr: "forbidden"} },
			Warn, [4]string{"yes", "?", "-", "-"}, "synced", "could not list the pods of kube-system/coredns: forbidden", "may list pods in kube-system"},
		{"gateway alive", func(m *MemberFacts) {
			m.Gateway = GatewayFacts{Installed: true, Config: GatewayConfig{Peers: map[string]string{"west": "198.51.100.7:4143"}},
				Peers: map[string]peers.State{"west": {Alive: true, Probed: true}}}
		}, OK, [4]string{"yes", "2/2", "1s ago", "alive"}, "", "", ""},
		{"gateway of a flat pair", func(m *MemberFacts) {
			m.Gateway = GatewayFacts{Installed: true, Config: GatewayConfig{Peers: map[string]string{"paris": "198.51.100.8:4143"}}}
		}, OK, [4]string{"yes", "2/2", "1s ago", "-"}, "", "", ""},
		{"peer gateway down", func(m *MemberFacts) {
			m.Gateway = GatewayFacts{Installed: true, Config: GatewayConfig{Peers: map[string]string{"west": "198.51.100.7:4143"}},
				Peers: map[string]peers.State{"west": {Probed: true, Since: now.Add(-time.Minute), Error: "connection refused"}}}
		}, Fail, [4]string{"yes", "2/2", "1s ago", "down"}, "gateway",
			"east's gateway cannot reach west's ingress at 198.51.100.7:4143 since 2026-11-26T11:59:00Z: connection refused", "kubectl --context kind-west -n mcmirror get pods"},
		{"peer not probed yet", func(m *MemberFacts) {
			m.Gateway = GatewayFacts{Installed: true, Config: GatewayConfig{Peers: map[string]string{"west": "198.51.100.7:4143"}}, Peers: map[string]peers.State{}}
		}, Warn, [4]string{"yes", "2/2", "1s ago", "unprobed"}, "gateway", "east's gateway has not probed west's ingress (198.51.100.7:4143) yet", ""},
		{"own gateway not served", func(m *MemberFacts) {
			m.Gateway = GatewayFacts{Installed: true, Config: GatewayConfig{Peers: map[string]string{"west": "198.51.100.7:4143"}},
				Service: "mcmirror/mcmirror-gateway-metrics", Unserved: true, ProxyErr: "no endpoints available", PeersErr: "no endpoints available"}
		}, Fail, [4]string{"yes", "2/2", "1s ago", "down"}, "gateway", "no gateway pod of east serves Service mcmirror/mcmirror-gateway-metrics", ""},
		{"peers unreadable", func(m *MemberFacts) {
			m.Gateway = GatewayFacts{Installed: true, Config: GatewayConfig{Peers: map[string]string{"west": "198.51.100.7:4143"}}, PeersErr: "/peers: forbidden"}
		}, Warn, [4]string{"yes", "2/2", "1s ago", "?"}, "gateway", "could not read east's gateway's peers: /peers: forbidden", "services/proxy"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := healthySource("east", "west")
			c.edit(m)
			got := EvaluateFleet([]fleet.Pair{pair}, map[string]*MemberFacts{"east": m})[0]
			assert.Equal(t, c.status, got.Status)
			assert.Equal(t, c.cells, [4]string{got.Linked, got.Synced, got.LastChange, got.Gateway})
			if c.status == OK {
				assert.Empty(t, got.Problems)
				return
			}
			var found *Result
			for i := range got.Problems {
				assert.Equal(t, "east->west", got.Problems[i].Subject)
				assert.NotEqual(t, OK, got.Problems[i].Status)
				if got.Problems[i].ID == c.id {
					found = &got.Problems[i]
				}
			}
			require.NotNil(t, found, "a problem %s in %+v", c.id, got.Problems)
			assert.Equal(t, c.status, found.Status)
			assert.Contains(t, found.Message, c.msg)
			assert.Contains(t, found.Fix, c.fix)
			assert.NotEmpty(t, found.Fix)
		})
	}
}

// A --peer that no Secret links is not linked, as a check of the source
// says it.
func TestEvaluateFleetPeerWithoutLink(t *testing.T) {
	m := healthySource("east")
	m.Links.Peers = []string{"west"}
	m.Gateway = GatewayFacts{Installed: true, Config: GatewayConfig{Peers: map[string]string{"west": "198.51.100.7:4143"}},
		Peers: map[string]peers.State{"west": {Alive: true, Probed: true}}}
	got := EvaluateFleet([]fleet.Pair{{Source: east, Target: west}}, map[string]*MemberFacts{"east": m})[0]
	assert.Equal(t, "no", got.Linked)
	assert.Equal(t, Fail, got.Status)
	require.NotEmpty(t, got.Problems)
	assert.Contains(t, got.Problems[0].Message, "the gateway has --peer west, but no usable link Secret for west")
}

func TestFleetReport(t *testing.T) {
	down := healthySource("east", "west", "paris")
	down.DNS.Replicas[0].Links["paris"] = ReplicaLink{Synced: true, LastSeen: now.Add(-42 * time.Second)}
	facts := map[string]*MemberFacts{"east": down, "kind-west": healthySource("west", "east", "paris"),
		"paris": {Server: "https://paris:6443", APIErr: "unreachable: connection refused"}}
	members := []fleet.Member{east, west, paris}
	pairs, err := fleet.Pairs(members, "mesh")
	require.NoError(t, err)
	servers := map[string]string{"east": "https://east:6443", "kind-west": "https://west:6443", "paris": "https://paris:6443"}
	r := NewFleetReport("mesh", members, servers, EvaluateFleet(pairs, facts))
	assert.Equal(t, Summary{OK: 3, Fail: 3}, r.Summary)
	assert.Equal(t, 1, r.ExitCode())

	var b bytes.Buffer
	require.NoError(t, r.WriteText(&b))
	assert.Equal(t, `mcmirror check of 3 clusters (east, west, paris), topology mesh: 6 pairs

SOURCE  TARGET  LINKED  SYNCED  LAST CHANGE  GATEWAY  STATUS
east    west    yes     2/2     1s ago       -        ok
east    paris   yes     1/2     42s ago      -        fail
west    east    yes     2/2     1s ago       -        ok
west    paris   yes     2/2     2s ago       -        ok
paris   east    ?       ?       -            ?        fail
paris   west    ?       ?       -            ?        fail

fail  synced east->paris: pod kube-system/coredns-a's link to paris is down, serving its last known state (last heard 42s ago)
      fix: kubectl --context east -n kube-system logs <pod> | grep paris (the link's errors: unreachable, unauthorized, forbidden); coredns-mc check --context east
fail  api paris->east: the API server of paris (https://paris:6443) does not answer: unreachable: connection refused
      fix: kubectl --context paris cluster-info; check --kubeconfig and the context
fail  api paris->west: the API server of paris (https://paris:6443) does not answer: unreachable: connection refused
      fix: kubectl --context paris cluster-info; check --kubeconfig and the context

3 ok, 0 warn, 3 fail
`, b.String())

	b.Reset()
	require.NoError(t, r.WriteJSON(&b))
	var back struct {
		FormatVersion int `json:"formatVersion"`
		Topology      string
		Clusters      []FleetCluster
		Pairs         []PairCheck
		Summary       Summary
	}
	require.NoError(t, json.Unmarshal(b.Bytes(), &back), b.String())
	assert.Equal(t, 1, back.FormatVersion)
	assert.Equal(t, FleetCluster{Name: "west", Context: "kind-west", Server: "https://west:6443"}, back.Clusters[1])
	assert.Equal(t, r.Pairs, back.Pairs)
	assert.Equal(t, r.Summary, back.Summary)

	ok := NewFleetReport("hub=east", members, servers, EvaluateFleet([]fleet.Pair{{Source: east, Target: west}}, facts))
	assert.Equal(t, 0, ok.ExitCode())
}

// The link states of a replica's /metrics, as the plugin exposes them.
func TestParseLinkMetrics(t *testing.T) {
	body := `# HELP coredns_mcmirror_link_synced Whether the informers of a cluster (linked or local) have synced: 1 or 0.
# TYPE coredns_mcmirror_link_synced gauge
coredns_mcmirror_link_synced{cluster="east"} 1
coredns_mcmirror_link_synced{cluster="west"} 1
coredns_mcmirror_link_synced{cluster="paris"} 0
# HELP coredns_mcmirror_link_up Whether the last list or watch of each kind of object of a cluster succeeded: 1 or 0.
# TYPE coredns_mcmirror_link_up gauge
coredns_mcmirror_link_up{cluster="east"} 1
coredns_mcmirror_link_up{cluster="west"} 0
coredns_mcmirror_link_up{cluster="gone"} 1
# TYPE coredns_mcmirror_link_withdrawn gauge
coredns_mcmirror_link_withdrawn{cluster="west"} 1
# TYPE coredns_mcmirror_link_last_sync_timestamp_seconds gauge
coredns_mcmirror_link_last_sync_timestamp_seconds{cluster="west"} 1.7801568e+09
# TYPE go_goroutines gauge
go_goroutines 42
`
	got, err := ParseLinkMetrics([]byte(body))
	require.NoError(t, err)
	assert.Equal(t, map[string]ReplicaLink{
		"east":  {Synced: true, Up: true},
		"west":  {Synced: true, Withdrawn: true, LastSeen: time.Unix(1780156800, 0)},
		"paris": {},
	}, got)

	_, err = ParseLinkMetrics([]byte("# TYPE go_goroutines gauge\ngo_goroutines 42\n"))
	assert.ErrorContains(t, err, "no coredns_mcmirror_link_synced: is it coredns-mc with the mcmirror plugin?")
	_, err = ParseLinkMetrics([]byte("coredns_mcmirror_link_synced{cluster=\"east\" 1\n"))
	assert.Error(t, err)
}

// Where the replicas' link states are read, and why not when they are not.
func TestDNSUnread(t *testing.T) {
	in := Install{DNS: Workload{Namespace: "kube-system", Name: "coredns", Found: true}, CorefileFrom: "ConfigMap kube-system/coredns, key Corefile"}
	corefile := func(prometheus string) DNSConfig {
		return ParseCorefile(".:53 {\n    errors\n" + prometheus + "    mcmirror cluster.local {\n        cluster east\n    }\n}\n")
	}
	for _, c := range []struct {
		in      Install
		dns     DNSConfig
		metrics string
		want    string
	}{
		{in, corefile("    prometheus :9153\n"), ":9153", ""},
		{in, corefile("    prometheus 0.0.0.0:9253\n"), "0.0.0.0:9253", ""},
		{in, corefile("    prometheus\n"), "localhost:9153", "listens on localhost:9153: not on the pods' address"},
		{in, corefile("    prometheus 127.0.0.1:9153\n"), "127.0.0.1:9153", "listens on 127.0.0.1:9153"},
		{in, corefile(""), "", "runs no prometheus plugin"},
		{in, ParseCorefile(".:53 {\n    prometheus :9153\n    forward . /etc/resolv.conf\n}\n"), ":9153", "has no mcmirror block"},
		{in, ParseCorefile(".:53 {\n    prometheus :9153\n    mcmirror cluster.local {\n        cluster east\n        source import\n    }\n}\n"), ":9153", "(source import): the controller's leader watches the links"},
		{Install{DNS: Workload{Namespace: "kube-system", Name: "coredns"}}, DNSConfig{}, "", "no Deployment kube-system/coredns, the cluster DNS"},
		{Install{DNS: Workload{Namespace: "kube-system", Name: "coredns", Err: "forbidden"}}, DNSConfig{}, "", "could not read Deployment kube-system/coredns: forbidden"},
		{Install{DNS: in.DNS, CorefileErr: "no ConfigMap volume"}, DNSConfig{}, "", "the Corefile of kube-system/coredns: no ConfigMap volume"},
	} {
		assert.Equal(t, c.metrics, c.dns.Metrics)
		got := dnsUnread(c.in, c.dns)
		if c.want == "" {
			assert.Empty(t, got)
		} else {
			assert.Contains(t, got, c.want)
		}
	}
	// The mcmirror block's prometheus wins over another block's.
	two := ParseCorefile("example.org {\n    prometheus :9999\n}\n.:53 {\n    prometheus :9153\n    mcmirror cluster.local {\n        cluster east\n    }\n}\n")
	assert.Equal(t, ":9153", two.Metrics)
	assert.True(t, strings.HasPrefix(ParseCorefile("example.org {\n    prometheus :9999\n}\n").Metrics, ":9999"))
}
