package fleet

import "sync"

// Each calls f(i) for every i in [0, n), at most parallel calls at once,
// and returns once every call has: the members and pairs of a fleet are
// worked on side by side, each call on its own.
func Each(n, parallel int, f func(i int)) {
	if parallel < 1 {
		parallel = 1
	}
	slots := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i := range n {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}
