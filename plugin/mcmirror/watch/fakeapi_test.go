package watch

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mcmirror/mcmirror/internal/remote/remotetest"
	"github.com/stretchr/testify/require"
)

// fakeAPI is a Kubernetes API server over a real socket, serving lists and
// watches of Services and EndpointSlices, that a test can take down and
// bring back on the same address, or have refuse every request (401, 403):
// what a linked cluster does to the plugin's client-go, without a control
// plane.
type fakeAPI struct {
	t    *testing.T
	addr string

	mu      sync.Mutex
	rv      int
	objs    map[string]metav1.Object // kind/ns/name → *corev1.Service or *discovery.EndpointSlice
	events  []fakeEvent
	changed chan struct{} // closed at each change or state change
	code    int           // answer every request with this status; 0 serves
	srv     *httptest.Server
}

type fakeEvent struct {
	rv       int
	kind     string
	old, obj metav1.Object // old nil: added
}

// newFakeAPI returns a server holding objs, up until the test ends.
func newFakeAPI(t *testing.T, objs ...metav1.Object) *fakeAPI {
	f := &fakeAPI{t: t, objs: map[string]metav1.Object{}, changed: make(chan struct{})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f.addr = l.Addr().String()
	f.serve(l)
	t.Cleanup(f.down)
	for _, o := range objs {
		f.put(o)
	}
	return f
}

func (f *fakeAPI) serve(l net.Listener) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(f.handle))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	f.mu.Lock()
	f.srv = srv
	f.mu.Unlock()
}

// client returns a client of the server.
func (f *fakeAPI) client() kubernetes.Interface {
	c, err := kubernetes.NewForConfig(&rest.Config{Host: "http://" + f.addr})
	require.NoError(f.t, err)
	return c
}

// down stops the server: connections are refused, watches end.
func (f *fakeAPI) down() {
	f.mu.Lock()
	srv := f.srv
	f.srv = nil
	f.notify()
	f.mu.Unlock()
	if srv != nil {
		srv.CloseClientConnections()
		srv.Close()
	}
}

// up brings the server back on its address.
func (f *fakeAPI) up() {
	l, err := net.Listen("tcp", f.addr)
	require.NoError(f.t, err)
	f.serve(l)
}

// refuse has every request answered with code (401, 403), and every watch
// end; 0 serves again.
func (f *fakeAPI) refuse(code int) {
	f.mu.Lock()
	f.code = code
	f.notify()
	f.mu.Unlock()
}

func (f *fakeAPI) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func kindOf(obj metav1.Object) string {
	if _, ok := obj.(*corev1.Service); ok {
		return "services"
	}
	return "endpointslices"
}

// put creates or replaces obj. As the EndpointSlice controller does, a
// slice carries the labels of its Service, and a Service's labels are
// copied onto its slices when they change.
func (f *fakeAPI) put(obj metav1.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch o := obj.(type) {
	case *discovery.EndpointSlice:
		if svc, ok := f.objs["services/"+o.Namespace+"/"+o.Labels[discovery.LabelServiceName]]; ok {
			o.Labels = remotetest.SliceLabels(svc.GetLabels(), o.Labels)
		}
	case *corev1.Service:
		f.putLocked(obj)
		var all []*discovery.EndpointSlice
		for _, other := range f.objs {
			if es, ok := other.(*discovery.EndpointSlice); ok {
				all = append(all, es)
			}
		}
		for _, es := range remotetest.Relabeled(o, all) {
			f.putLocked(es)
		}
		return
	}
	f.putLocked(obj)
}

// putLocked creates or replaces obj; with f.mu held.
func (f *fakeAPI) putLocked(obj metav1.Object) {
	f.rv++
	obj.SetResourceVersion(strconv.Itoa(f.rv))
	k := kindOf(obj) + "/" + obj.GetNamespace() + "/" + obj.GetName()
	f.events = append(f.events, fakeEvent{rv: f.rv, kind: kindOf(obj), old: f.objs[k], obj: obj})
	f.objs[k] = obj
	f.notify()
}

func (f *fakeAPI) handle(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	code := f.code
	f.mu.Unlock()
	if code != 0 {
		reason := metav1.StatusReasonUnauthorized
		if code == http.StatusForbidden {
			reason = metav1.StatusReasonForbidden
		}
		writeJSON(w, code, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status: metav1.StatusFailure, Reason: reason, Code: int32(code), Message: "refused by the test"})
		return
	}
	// /api/v1/services, /apis/discovery.k8s.io/v1/endpointslices, and
	// their namespaced forms.
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	kind, ns := parts[len(parts)-1], ""
	if len(parts) >= 2 && parts[len(parts)-3] == "namespaces" {
		ns = parts[len(parts)-2]
	}
	if kind != "services" && kind != "endpointslices" {
		http.NotFound(w, r)
		return
	}
	sel, err := k8slabels.Parse(r.URL.Query().Get("labelSelector"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	match := func(obj metav1.Object) bool {
		return obj != nil && kindOf(obj) == kind && (ns == "" || obj.GetNamespace() == ns) && sel.Matches(k8slabels.Set(obj.GetLabels()))
	}
	q := r.URL.Query()
	if q.Get("watch") != "true" && q.Get("watch") != "1" {
		f.list(w, r.URL.Path, kind, match)
		return
	}
	f.watch(w, r, match, q.Get("resourceVersion"), q.Get("sendInitialEvents") == "true")
}

func (f *fakeAPI) list(w http.ResponseWriter, path, kind string, match func(metav1.Object) bool) {
	f.mu.Lock()
	rv := strconv.Itoa(f.rv)
	var out runtime.Object
	if kind == "services" {
		l := &corev1.ServiceList{TypeMeta: metav1.TypeMeta{Kind: "ServiceList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: rv}}
		for _, o := range f.objs {
			if match(o) {
				l.Items = append(l.Items, *o.(*corev1.Service))
			}
		}
		out = l
	} else {
		l := &discovery.EndpointSliceList{TypeMeta: metav1.TypeMeta{Kind: "EndpointSliceList", APIVersion: "discovery.k8s.io/v1"}, ListMeta: metav1.ListMeta{ResourceVersion: rv}}
		for _, o := range f.objs {
			if match(o) {
				l.Items = append(l.Items, *o.(*discovery.EndpointSlice))
			}
		}
		out = l
	}
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// watch streams the events after rv, or, from "" or "0" or with
// sendInitialEvents, the objects as ADDED first (then the bookmark that
// ends them), until the server changes state.
func (f *fakeAPI) watch(w http.ResponseWriter, r *http.Request, match func(metav1.Object) bool, rv string, initial bool) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	enc := json.NewEncoder(w)
	send := func(typ string, obj metav1.Object) bool {
		return enc.Encode(map[string]any{"type": typ, "object": obj}) == nil
	}
	f.mu.Lock()
	code, srv := f.code, f.srv
	if srv == nil {
		// Accepted as the server went down (or before serve recorded
		// it): end it, as down ends every other watch, or Close would
		// wait for it forever.
		f.mu.Unlock()
		return
	}
	from, _ := strconv.Atoi(rv)
	next := len(f.events)
	if rv == "" || rv == "0" || initial {
		for _, o := range f.objs {
			if match(o) && !send("ADDED", withKind(o)) {
				f.mu.Unlock()
				return
			}
		}
		from = f.rv
		if initial {
			bm := &corev1.Service{TypeMeta: metav1.TypeMeta{Kind: "Service", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{
				ResourceVersion: strconv.Itoa(f.rv), Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
			if strings.HasSuffix(r.URL.Path, "endpointslices") {
				send("BOOKMARK", &discovery.EndpointSlice{TypeMeta: metav1.TypeMeta{Kind: "EndpointSlice", APIVersion: "discovery.k8s.io/v1"}, ObjectMeta: bm.ObjectMeta})
			} else {
				send("BOOKMARK", bm)
			}
		}
	} else {
		next = 0
	}
	f.mu.Unlock()
	fl.Flush()
	for {
		f.mu.Lock()
		if f.code != code || f.srv != srv {
			f.mu.Unlock()
			return
		}
		for ; next < len(f.events); next++ {
			e := f.events[next]
			if e.rv <= from {
				continue
			}
			om, nm := match(e.old), match(e.obj)
			switch {
			case om && nm:
				send("MODIFIED", withKind(e.obj))
			case nm:
				send("ADDED", withKind(e.obj))
			case om: // changed so that it no longer matches
				send("DELETED", withKind(e.obj))
			}
		}
		ch := f.changed
		f.mu.Unlock()
		fl.Flush()
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		}
	}
}

// withKind sets the TypeMeta the decoder wants.
func withKind(o metav1.Object) metav1.Object {
	switch o := o.(type) {
	case *corev1.Service:
		c := o.DeepCopy()
		c.Kind, c.APIVersion = "Service", "v1"
		return c
	case *discovery.EndpointSlice:
		c := o.DeepCopy()
		c.Kind, c.APIVersion = "EndpointSlice", "discovery.k8s.io/v1"
		return c
	}
	panic(fmt.Sprintf("%T", o))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
