package main

import (
	"context"
	"embed"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
)

//go:embed static
var staticFiles embed.FS

// serveWeb serves the page, its WebSocket, the source of truth and the
// buttons' actions on ln.
func (d *Demo) serveWeb(ln net.Listener) {
	static, _ := fs.Sub(staticFiles, "static") // cannot fail: the directory is embedded
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(static))
	mux.HandleFunc("GET /ws", d.handleWS)
	mux.HandleFunc("GET /api/truth", d.handleTruth)
	mux.HandleFunc("GET /api/state", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(d.hub.latestView())
	})
	mux.HandleFunc("POST /api/nodes/{node}/{action}", d.handleLink)
	mux.HandleFunc("GET /api/nodes/{node}/{page}", d.handleNodePage)
	mux.HandleFunc("POST /api/burst", func(w http.ResponseWriter, _ *http.Request) {
		d.Burst()
		w.WriteHeader(http.StatusNoContent)
	})
	base, cancel := context.WithCancel(context.Background())
	d.webCancel = cancel
	d.web = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		BaseContext: func(net.Listener) context.Context { return base }}
	go func() {
		if err := d.web.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error().Err(err).Msg("page server")
		}
	}()
}

// handleTruth is the source of truth a node reloads from after
// CursorExpired.
func (d *Demo) handleTruth(w http.ResponseWriter, _ *http.Request) {
	b, err := marshalScore(d.authority.Truth())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

func (d *Demo) handleLink(w http.ResponseWriter, r *http.Request) {
	node, err := strconv.Atoi(r.PathValue("node"))
	action := r.PathValue("action")
	if err != nil || !linkActions[action] {
		http.Error(w, "want /api/nodes/{1..n}/{offline|online|blip|outage}", http.StatusNotFound)
		return
	}
	if err := d.linkAction(node, action); err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleNodePage passes a node's /metrics (Prometheus) or /health through.
func (d *Demo) handleNodePage(w http.ResponseWriter, r *http.Request) {
	node, err := strconv.Atoi(r.PathValue("node"))
	page := r.PathValue("page")
	if err != nil || node < 1 || node > len(d.children) || (page != "metrics" && page != "health") {
		http.Error(w, "want /api/nodes/{1..n}/{metrics|health}", http.StatusNotFound)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, d.children[node-1].control+"/"+page, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, "node "+strconv.Itoa(node)+" is not answering: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer res.Body.Close()
	w.Header().Set("Content-Type", res.Header.Get("Content-Type"))
	w.WriteHeader(res.StatusCode)
	_, _ = io.Copy(w, res.Body)
}

// handleWS pushes every new view to the page until it goes away or the
// demo stops.
func (d *Demo) handleWS(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil) // same origin only
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx := c.CloseRead(r.Context())
	for {
		view, changed := d.hub.latest()
		if view != nil {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := c.Write(wctx, websocket.MessageText, view)
			cancel()
			if err != nil {
				return
			}
		}
		select {
		case <-ctx.Done():
			_ = c.Close(websocket.StatusGoingAway, "demo stopping")
			return
		case <-changed:
		}
	}
}

// hub holds the latest view and wakes the WebSocket handlers when it
// changes. Safe for concurrent use.
type hub struct {
	mu      sync.Mutex
	view    []byte
	changed chan struct{} // closed and replaced by publish
}

func newHub() *hub { return &hub{changed: make(chan struct{})} }

func (h *hub) publish(view []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.view = view
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *hub) latest() ([]byte, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.view, h.changed
}

func (h *hub) latestView() []byte {
	v, _ := h.latest()
	if v == nil {
		return []byte("{}")
	}
	return v
}
