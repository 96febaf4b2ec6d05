package mock

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"time"
)

// ServeForwardProxy listens on addr and serves a minimal HTTP forward proxy there: CONNECT
// tunnels and absolute-URI GETs, so probes and crawlers on a laptop go through a real proxy.
// It dials out from the address it listens on, so a site sees each proxy as its own client,
// as it would a fleet of machines. The returned stop closes the listener and every open tunnel.
func ServeForwardProxy(addr string) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	f := newForwarder(ln.Addr())
	srv := &http.Server{
		Handler:           http.HandlerFunc(f.forward),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       30 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
	}, nil
}

// forwarder relays requests from one proxy address.
type forwarder struct {
	dialer    *net.Dialer
	transport *http.Transport
}

// newForwarder dials from the listening IP (port chosen by the kernel); a wildcard listener
// dials from wherever the route says.
func newForwarder(listen net.Addr) *forwarder {
	d := &net.Dialer{Timeout: 10 * time.Second}
	if a, ok := listen.(*net.TCPAddr); ok && !a.IP.IsUnspecified() {
		d.LocalAddr = &net.TCPAddr{IP: a.IP}
	}
	return &forwarder{dialer: d, transport: &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		ResponseHeaderTimeout: 30 * time.Second,
		DisableKeepAlives:     true,
	}}
}

func (f *forwarder) forward(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		f.tunnel(w, r)
		return
	}
	if !r.URL.IsAbs() {
		http.Error(w, "mock proxy: absolute URI required", http.StatusBadRequest)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Header.Del("Proxy-Connection")
	out.Header.Del("Proxy-Authorization")
	resp, err := f.transport.RoundTrip(out)
	if err != nil {
		http.Error(w, "mock proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (f *forwarder) tunnel(w http.ResponseWriter, r *http.Request) {
	upstream, err := f.dialer.DialContext(r.Context(), "tcp", r.Host)
	if err != nil {
		http.Error(w, "mock proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		upstream.Close()
		http.Error(w, "mock proxy: cannot hijack", http.StatusInternalServerError)
		return
	}
	// The 200 is written on the hijacked connection itself: through the ResponseWriter it
	// would carry Transfer-Encoding: chunked, which strict clients refuse on a CONNECT answer.
	client, buf, err := hj.Hijack()
	if err != nil {
		upstream.Close()
		return
	}
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		client.Close()
		upstream.Close()
		return
	}
	// Bytes the client sent after the CONNECT line are already buffered.
	if n := buf.Reader.Buffered(); n > 0 {
		b, _ := buf.Reader.Peek(n)
		if _, err := upstream.Write(b); err != nil {
			client.Close()
			upstream.Close()
			return
		}
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
		if tcp, ok := dst.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(upstream, client)
	go pipe(client, upstream)
	<-done
	<-done
	client.Close()
	upstream.Close()
}
