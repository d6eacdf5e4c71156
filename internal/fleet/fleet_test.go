package fleet

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMembers(t *testing.T) {
	got, err := Members([]string{"east", "kind-west", "paris"}, map[string]string{"kind-west": "west"})
	require.NoError(t, err)
	assert.Equal(t, []Member{{"east", "east"}, {"kind-west", "west"}, {"paris", "paris"}}, got)
	assert.Equal(t, "west (context kind-west)", got[1].String())
	assert.Equal(t, "east", got[0].String())

	for _, c := range []struct {
		contexts []string
		names    map[string]string
		want     string
	}{
		{[]string{"east"}, nil, "a fleet takes two contexts or more, not 1"},
		{[]string{"east", "east"}, nil, `context "east" listed twice`},
		{[]string{"east", "arn:aws:eks:eu-west-1:1:cluster/west"}, nil,
			`context "arn:aws:eks:eu-west-1:1:cluster/west": invalid cluster name "arn:aws:eks:eu-west-1:1:cluster/west": ` +
				`a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character ` +
				`(e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?'): name it with --cluster-name arn:aws:eks:eu-west-1:1:cluster/west=NAME`},
		{[]string{"east", "west"}, map[string]string{"west": "West"}, `--cluster-name west=West: invalid cluster name "West"`},
		{[]string{"east", "global"}, nil, `context "global": invalid cluster name "global": reserved for the global names`},
		{[]string{"east", "kind-east"}, map[string]string{"kind-east": "east"}, `contexts "east" and "kind-east" are both named "east"`},
		{[]string{"east", "west"}, map[string]string{"paris": "paris"}, `--cluster-name paris=paris: context "paris" is not in the list`},
	} {
		_, err := Members(c.contexts, c.names)
		assert.ErrorContains(t, err, c.want, "%q %v", c.contexts, c.names)
	}
}

func TestPairs(t *testing.T) {
	ms, err := Members([]string{"east", "kind-west", "paris"}, map[string]string{"kind-west": "west"})
	require.NoError(t, err)
	names := func(ps []Pair) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.String())
		}
		return out
	}
	mesh := []string{"east->west", "east->paris", "west->east", "west->paris", "paris->east", "paris->west"}
	for _, c := range []struct {
		topology string
		want     []string
	}{
		{"", mesh},
		{"mesh", mesh},
		{"hub=east", []string{"east->west", "east->paris", "west->east", "paris->east"}},
		{"hub=kind-west", []string{"east->west", "west->east", "west->paris", "paris->west"}},
		{"hub=west", []string{"east->west", "west->east", "west->paris", "paris->west"}},
		{"east->west, kind-west->paris,paris->east", []string{"east->west", "west->paris", "paris->east"}},
		{"east<->west,west->paris", []string{"east->west", "west->east", "west->paris"}},
		{"paris->east,east->paris,paris->east,west->east", []string{"east->paris", "west->east", "paris->east"}},
	} {
		got, err := Pairs(ms, c.topology)
		require.NoError(t, err, c.topology)
		assert.Equal(t, c.want, names(got), c.topology)
	}
	got, err := Pairs(ms, "hub=west")
	require.NoError(t, err)
	assert.Equal(t, Pair{Source: Member{"east", "east"}, Target: Member{"kind-west", "west"}}, got[0])

	for _, c := range []struct{ topology, want string }{
		{"hub=tokyo", `topology "hub=tokyo": "tokyo" is no context or cluster name of the list`},
		{"east->west", `topology "east->west": context "paris" is in no pair`},
		{"east->east,west<->paris", `topology "east->east,west<->paris": "east->east": a cluster does not link itself`},
		{"east=>west", `"east=>west": want mesh, hub=CLUSTER, or pairs A->B or A<->B separated by commas`},
		{"star", `"star": want mesh, hub=CLUSTER`},
		{"east->west,,paris->east", `"": want mesh`},
	} {
		_, err := Pairs(ms, c.topology)
		assert.ErrorContains(t, err, c.want, c.topology)
	}
}

func TestAssignments(t *testing.T) {
	var a Assignments
	require.NoError(t, a.Set("kind-east=east"))
	require.NoError(t, a.Set("kind-west=west"))
	assert.Equal(t, "kind-east=east,kind-west=west", a.String())
	assert.Equal(t, map[string]string{"kind-east": "east", "kind-west": "west"}, a.Values)
	assert.EqualError(t, a.Set("kind-east=paris"), "kind-east given twice (east and paris)")
	for _, bad := range []string{"east", "=east", "east="} {
		assert.EqualError(t, a.Set(bad), `"`+bad+`": want CONTEXT=VALUE`)
	}
	// An API server URL may hold "=" itself: only the first one splits.
	var u Assignments
	require.NoError(t, u.Set("east=https://east.example:6443/?a=b"))
	assert.Equal(t, "https://east.example:6443/?a=b", u.Values["east"])
}

func TestWriteOutcomes(t *testing.T) {
	east, west, paris := Member{"east", "east"}, Member{"kind-west", "west"}, Member{"paris", "paris"}
	var b bytes.Buffer
	require.NoError(t, WriteOutcomes(&b, []Outcome{
		{Pair{east, west}, Linked, "created link Secret mcmirror-links/cluster-credentials-west"},
		{Pair{west, east}, Unchanged, "already linked: nothing written"},
		{Pair{paris, east}, Failed, "target cluster https://east:6443: no token\nin Secret"},
	}))
	assert.Equal(t, `SOURCE  TARGET  RESULT     DETAIL
east    west    linked     created link Secret mcmirror-links/cluster-credentials-west
west    east    unchanged  already linked: nothing written
paris   east    failed     target cluster https://east:6443: no token in Secret

3 pairs: 1 linked, 1 unchanged, 1 failed
`, b.String())
	assert.Equal(t, 1, FailedCount([]Outcome{{Result: Failed}, {Result: Unlinked}}))

	b.Reset()
	require.NoError(t, WriteOutcomes(&b, []Outcome{{Pair{east, west}, Unlinked, "deleted"}}))
	assert.True(t, strings.HasSuffix(b.String(), "\n1 pair: 1 unlinked\n"), b.String())
}

func TestEach(t *testing.T) {
	// Each call waits until three run at once: with a bound of three,
	// every call gets there (it holds a slot, and so do two others); a
	// bound above three shows in the peak, one below never gets there.
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	running, peak := 0, 0
	done := make([]bool, 21)
	Each(len(done), 3, func(i int) {
		mu.Lock()
		defer mu.Unlock()
		running++
		peak = max(peak, running)
		cond.Broadcast()
		for running < 3 && peak < 3 {
			cond.Wait()
		}
		running--
		done[i] = true
	})
	assert.Equal(t, 3, peak, "at most 3 at once")
	assert.NotContains(t, done, false, "every index called")
	Each(0, 0, func(int) { t.Fatal("no call for n = 0") })
}
