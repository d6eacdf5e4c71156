// Package corefile computes the Corefile that `coredns-mc dns apply` gives
// the cluster DNS: the Corefile the cluster already runs, with mcmirror's
// block added to the server block that answers the cluster domain, and
// nothing else of it lost. Every function here is a function of its
// arguments (text in, text out): the command reads the cluster's ConfigMap
// and writes the result, and tests need no cluster.
//
// The edit is textual, at lines that CoreDNS's own Corefile parser
// (github.com/coredns/caddy/caddyfile) locates: every other line (server
// blocks, plugins, stub domains, forwarders, comments, `import` lines)
// stays byte for byte.
package corefile

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/coredns/caddy/caddyfile"
)

// Edit is what Add adds to a Corefile.
type Edit struct {
	// Zone is the cluster domain (cluster.local): the block whose server
	// answers it gets the stanza.
	Zone string
	// ClusterSet is the zone of the Multi-Cluster Services API's names
	// (clusterset.local), which the same server must answer; empty: none.
	ClusterSet string
	// Stanza is the mcmirror directive and its block, unindented; it is
	// indented as the line it is put before.
	Stanza string
	// Upstream, when not empty, replaces each file (a resolv.conf) that a
	// forward of the Corefile names as its upstream: the resolvers the DNS
	// pods forward other names to.
	Upstream []string
}

// Result is the edited Corefile, and what was done to it, for the log.
type Result struct {
	Corefile string
	// Block names the server block that got the stanza ("the block .:53,
	// line 1").
	Block string
	// Forwards lists the forward lines whose upstream file Upstream
	// replaced ("line 12: /etc/resolv.conf -> 10.0.0.2").
	Forwards []string
	// Lameduck says how the health plugin's lameduck was raised to
	// MinLameduck ("" when it was that long already, or there is no
	// health plugin).
	Lameduck string
	// Labels says, when the stanza is in import mode (`source import`),
	// how the kubernetes plugin was given labels.NotFlatEndpoints, or why
	// it was not.
	Labels string
}

// MinLameduck is the shortest lameduck of the health plugin that the
// edited server block keeps: how long a DNS pod that got SIGTERM goes on
// answering, once its readiness (probed every second, two failures) has
// taken it out of the Service and kube-proxy has dropped the conntrack
// entries that lead to it (deploy/README.md, "The rollout").
const MinLameduck = 10 * time.Second

// block is one server block as the parser found it.
type block struct {
	keys   []string
	tokens map[string][]caddyfile.Token
	line   int // of its first key
}

// parse reads corefile with CoreDNS's parser. Lines whose first word is
// `import` are blanked first (same line numbers): what they import is a
// file of the DNS pod's (k3s's /etc/coredns/custom/*.server) or a snippet,
// not readable here, and kept as it is.
func parse(corefile string) ([]block, error) {
	lines := strings.Split(corefile, "\n")
	for i, l := range lines {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "import" {
			lines[i] = ""
		}
	}
	sbs, err := caddyfile.Parse("Corefile", strings.NewReader(strings.Join(lines, "\n")), nil)
	if err != nil {
		return nil, err
	}
	var out []block
	for _, sb := range sbs {
		b := block{keys: sb.Keys, tokens: sb.Tokens, line: 1 << 30}
		for _, ts := range sb.Tokens {
			if len(ts) > 0 && ts[0].Line < b.line {
				b.line = ts[0].Line
			}
		}
		// The line of its first key: the line before its first token
		// (or of it) that starts with that key.
		for l := min(b.line, len(lines)); l >= 1 && len(b.keys) > 0; l-- {
			if f := strings.Fields(lines[l-1]); len(f) > 0 && f[0] == b.keys[0] {
				b.line = l
				break
			}
		}
		out = append(out, b)
	}
	return out, nil
}

// zoneAndPort splits a server block key (".:53", "dns://cluster.local",
// "consul.local:53") into its zone, fully qualified and lower case, and
// its port (53 when it names none).
func zoneAndPort(key string) (string, int) {
	k := strings.TrimPrefix(strings.ToLower(key), "dns://")
	port := 53
	if i := strings.LastIndex(k, ":"); i >= 0 {
		if p, err := strconv.Atoi(k[i+1:]); err == nil {
			port, k = p, k[:i]
		}
	}
	return fqdn(k), port
}

func fqdn(z string) string {
	z = strings.ToLower(strings.TrimSpace(z))
	if !strings.HasSuffix(z, ".") {
		z += "."
	}
	return z
}

// inZone reports whether name is zone or below it.
func inZone(name, zone string) bool {
	return zone == "." || name == zone || strings.HasSuffix(name, "."+zone)
}

// serving returns the index of the block that CoreDNS hands a query for
// name on port 53 to (the one with the longest matching zone), the
// matching key, and -1 when none does.
func serving(blocks []block, name string) (int, string) {
	best, bestKey, bestLen := -1, "", -1
	for i, b := range blocks {
		for _, k := range b.keys {
			z, p := zoneAndPort(k)
			if p == 53 && inZone(name, z) && len(z) > bestLen {
				best, bestKey, bestLen = i, k, len(z)
			}
		}
	}
	return best, bestKey
}

// Add returns corefile with e.Stanza put, indented as that line, before the
// `kubernetes` line of the server block that answers e.Zone on port 53,
// with its health's lameduck at least MinLameduck, in import mode with
// the kubernetes plugin's labels selecting no copy of a linked cluster's
// endpoints (hideCopies), and, with e.Upstream, each forward's resolv.conf
// replaced by it. It refuses, saying why and what to do, a Corefile that
// does not parse, that has mcmirror already, whose server for e.Zone has
// no kubernetes plugin, or that answers e.ClusterSet in another server
// block.
func Add(corefile string, e Edit) (Result, error) {
	blocks, err := parse(corefile)
	if err != nil {
		return Result{}, fmt.Errorf("the Corefile does not parse: %v", err)
	}
	if strings.TrimSpace(e.Stanza) == "" {
		return Result{}, errors.New("no mcmirror stanza to add")
	}
	for _, b := range blocks {
		if ts := b.tokens["mcmirror"]; len(ts) > 0 {
			return Result{}, fmt.Errorf("the Corefile has an mcmirror block already (line %d): remove it from the cluster's Corefile, "+
				"or set dns.patchDeployment=false and keep your own", ts[0].Line)
		}
	}
	zone := fqdn(e.Zone)
	i, _ := serving(blocks, zone)
	if i < 0 {
		return Result{}, fmt.Errorf("no server block of the Corefile answers %s on port 53: add mcmirror to your DNS by hand "+
			"(dns.patchDeployment=false), or use dns.mode=forward", zone)
	}
	b := blocks[i]
	name := fmt.Sprintf("the block %s (line %d)", strings.Join(b.keys, " "), b.line)
	kube := b.tokens["kubernetes"]
	if len(kube) == 0 {
		return Result{}, fmt.Errorf("%s answers %s but has no kubernetes plugin: this is not a Kubernetes cluster DNS that mcmirror can join; "+
			"use dns.mode=forward", name, zone)
	}
	if e.ClusterSet != "" {
		cs := fqdn(e.ClusterSet)
		if j, k := serving(blocks, cs); j != i {
			where := "no server block"
			if j >= 0 {
				where = fmt.Sprintf("the block %s (line %d)", k, blocks[j].line)
			}
			return Result{}, fmt.Errorf("%s answers %s but %s answers %s: mcmirror answers both in one server; "+
				"remove the block for %s (a forward to mcmirror-dns of dns.mode=forward, say) before you install in replace mode",
				name, zone, where, cs, cs)
		}
	}
	lines := strings.Split(corefile, "\n")
	res := Result{Block: name}
	if len(e.Upstream) > 0 {
		if res.Forwards, err = replaceUpstream(lines, blocks, e.Upstream); err != nil {
			return Result{}, err
		}
	}
	at := kube[0].Line - 1
	indent := leading(lines[at])
	stanza := strings.Split(strings.TrimRight(e.Stanza, "\n"), "\n")
	for i, l := range stanza {
		if strings.TrimSpace(l) == "" {
			stanza[i] = ""
		} else {
			stanza[i] = indent + l
		}
	}
	lines = slices.Insert(lines, at, stanza...)
	shift := func(line int) int { // a line of the original, in lines
		if line-1 >= at {
			return line + len(stanza)
		}
		return line
	}
	if res.Lameduck, err = raiseLameduck(lines, b.tokens["health"], shift); err != nil {
		return Result{}, err
	}
	if ImportSource(e.Stanza) {
		res.Labels = hideCopies(lines, kube, shift)
	}
	res.Corefile = strings.Join(lines, "\n")
	// What CoreDNS will read: it must still parse, with the stanza where
	// it was put.
	if after, err := parse(res.Corefile); err != nil {
		return Result{}, fmt.Errorf("the Corefile with mcmirror's block does not parse (%v): the stanza does not fit the line before the kubernetes plugin (line %d)", err, kube[0].Line)
	} else if j, _ := serving(after, zone); j < 0 || len(after[j].tokens["mcmirror"]) == 0 {
		return Result{}, fmt.Errorf("the Corefile with mcmirror's block has it outside %s", name)
	}
	return res, nil
}

// ImportSource reports whether stanza, an mcmirror block, reads the linked
// clusters' exports from the local mirrors: `source import`.
func ImportSource(stanza string) bool {
	sbs, err := caddyfile.Parse("stanza", strings.NewReader(". {\n"+stanza+"\n}"), nil)
	if err != nil || len(sbs) != 1 {
		return false
	}
	ts := sbs[0].Tokens["mcmirror"]
	for i := 1; i+1 < len(ts); i++ {
		if ts[i].Text == "source" && ts[i-1].Line != ts[i].Line && ts[i+1].Line == ts[i].Line {
			return ts[i+1].Text == "import"
		}
	}
	return false
}

// raiseLameduck makes the lameduck of the health directive health (its
// tokens; none: nothing to do) at least MinLameduck, in lines, where shift
// maps a line number of the original to its number in lines. It adds the
// option or a block where there is none; it returns what it did.
func raiseLameduck(lines []string, health []caddyfile.Token, shift func(int) int) (string, error) {
	if len(health) == 0 {
		return "", nil
	}
	h := health[0]
	for i, t := range health {
		if t.Text != "lameduck" || i+1 >= len(health) {
			continue
		}
		v := health[i+1]
		d, err := time.ParseDuration(v.Text)
		if err != nil {
			return "", fmt.Errorf("line %d: health's lameduck %q is not a duration", v.Line, v.Text)
		}
		if d >= MinLameduck {
			return "", nil
		}
		n := shift(v.Line) - 1
		re := regexp.MustCompile(`(\blameduck\s+)` + regexp.QuoteMeta(v.Text))
		if !re.MatchString(lines[n]) {
			return "", fmt.Errorf("line %d: health's lameduck is not written on one line", v.Line)
		}
		lines[n] = re.ReplaceAllString(lines[n], "${1}"+MinLameduck.String())
		return fmt.Sprintf("line %d: health's lameduck %s -> %s", v.Line, v.Text, MinLameduck), nil
	}
	if err := addOption(lines, health, shift, "lameduck "+MinLameduck.String()); err != nil {
		return "", fmt.Errorf("%v: give it lameduck %s by hand", err, MinLameduck)
	}
	return fmt.Sprintf("line %d: health's lameduck (none: 0 s) -> %s", h.Line, MinLameduck), nil
}

// addOption adds option, on a line of its own, to the block of the
// directive dir (its tokens) in lines, where shift maps a line number of
// the original to its number in lines: first in its block, or in a block
// of its own when it has none. It refuses a directive laid out otherwise
// than one option a line.
func addOption(lines []string, dir []caddyfile.Token, shift func(int) int, option string) error {
	d := dir[0]
	n := shift(d.Line) - 1
	indent := leading(lines[n])
	line := indent + "    " + option
	if i := slices.IndexFunc(dir, func(t caddyfile.Token) bool { return t.Text == "{" }); i >= 0 {
		// A block: the option first in it, on a line after the one of
		// its {.
		n = shift(dir[i].Line) - 1
		if strings.Contains(lines[n], "}") || strings.Contains(lines[n], "#") {
			return fmt.Errorf("line %d: %s's block is not laid out one option a line", d.Line, d.Text)
		}
		lines[n] += "\n" + line
		return nil
	}
	if strings.Contains(lines[n], "#") || strings.Contains(lines[n], "{") {
		return fmt.Errorf("line %d: %s is not alone on its line", d.Line, d.Text)
	}
	lines[n] = strings.TrimRight(lines[n], " \t") + " {\n" + line + "\n" + indent + "}"
	return nil
}

// hideCopies gives the kubernetes directive kube (its tokens) the label
// selector labels.NotFlatEndpoints in lines, where shift maps a line
// number of the original to its number in lines: ANDed to its labels
// option, or as a labels option of its own. In import mode the mirrors'
// flat-mode EndpointSlices, copies of every remote endpoint, are local
// objects that mcmirror answers every name of; without the selector the
// kubernetes plugin holds each of them a second time. It returns what it
// did; a directive it cannot edit safely is left as it is, and said so:
// that costs the DNS memory, not answers.
func hideCopies(lines []string, kube []caddyfile.Token, shift func(int) int) string {
	k := kube[0]
	for i := 1; i < len(kube); i++ {
		t := kube[i]
		if t.Text != "labels" || kube[i-1].Line == t.Line {
			continue // not an option at the start of its line
		}
		j := i + 1
		for j < len(kube) && kube[j].Line == t.Line {
			j++
		}
		n := shift(t.Line) - 1
		if j == i+1 || strings.ContainsAny(lines[n], "#{}") {
			return fmt.Sprintf("line %d: the kubernetes plugin's labels is not a selector alone on its line, so %s was not added to it: "+
				"add it by hand, or the kubernetes plugin holds import mode's copies of the linked clusters' endpoints too", t.Line, labels.NotFlatEndpoints)
		}
		// A word of its own: the plugin joins its arguments with spaces,
		// and a selector takes white space before a comma.
		lines[n] = strings.TrimRight(lines[n], " \t") + " ," + labels.NotFlatEndpoints
		return fmt.Sprintf("line %d: the kubernetes plugin's labels ANDed with %s", t.Line, labels.NotFlatEndpoints)
	}
	if err := addOption(lines, kube, shift, "labels "+labels.NotFlatEndpoints); err != nil {
		return fmt.Sprintf("%v, so labels %s was not added: add it by hand, or the kubernetes plugin holds import mode's copies of the linked clusters' endpoints too",
			err, labels.NotFlatEndpoints)
	}
	return fmt.Sprintf("line %d: the kubernetes plugin gets labels %s", k.Line, labels.NotFlatEndpoints)
}

// leading is the white space a line starts with.
func leading(l string) string {
	return l[:len(l)-len(strings.TrimLeft(l, " \t"))]
}

// forwards returns, for each forward directive of the blocks, its line
// number and its upstreams (the arguments after the zone).
func forwards(blocks []block) [][]caddyfile.Token {
	var out [][]caddyfile.Token
	for _, b := range blocks {
		ts := b.tokens["forward"]
		for i := 0; i < len(ts); {
			// One directive: its tokens up to the next "forward" that
			// starts a line of its own.
			j := i + 1
			for j < len(ts) && !(ts[j].Text == "forward" && ts[j].Line != ts[j-1].Line) {
				j++
			}
			var args []caddyfile.Token
			for k := i + 2; k < j && ts[k].Line == ts[i].Line && ts[k].Text != "{"; k++ {
				args = append(args, ts[k])
			}
			out = append(out, args)
			i = j
		}
	}
	return out
}

// replaceUpstream replaces, in lines, each file a forward names as an
// upstream (an argument that starts with /) by upstream.
func replaceUpstream(lines []string, blocks []block, upstream []string) ([]string, error) {
	for _, u := range upstream {
		if _, err := parseUpstream(u); err != nil {
			return nil, fmt.Errorf("dns.upstream %q: %v", u, err)
		}
	}
	var done []string
	for _, args := range forwards(blocks) {
		for _, a := range args {
			if !strings.HasPrefix(a.Text, "/") {
				continue
			}
			l := lines[a.Line-1]
			re := regexp.MustCompile(`(^|\s)` + regexp.QuoteMeta(a.Text) + `(\s|$)`)
			loc := re.FindStringSubmatchIndex(l)
			if loc == nil {
				return nil, fmt.Errorf("line %d: the upstream %s of a forward is not written as a word of its own", a.Line, a.Text)
			}
			lines[a.Line-1] = l[:loc[3]] + strings.Join(upstream, " ") + l[loc[4]:]
			done = append(done, fmt.Sprintf("line %d: %s -> %s", a.Line, a.Text, strings.Join(upstream, " ")))
		}
	}
	return done, nil
}

// parseUpstream reads a forward target as the forward plugin takes it: an
// address with an optional port, optionally after dns://.
func parseUpstream(u string) (netip.AddrPort, error) {
	s := strings.TrimPrefix(u, "dns://")
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.AddrPort{}, errors.New("not an IP address with an optional port (10.0.0.2, 10.0.0.2:53, [fd00::2]:53)")
	}
	return netip.AddrPortFrom(a, 53), nil
}
