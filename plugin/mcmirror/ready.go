package mcmirror

// Ready implements the ready.Readiness interface.
func (m *MCMirror) Ready() bool { return m.src.HasSynced() }
