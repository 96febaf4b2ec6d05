package gateway

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// HeaderError names why the gateway refused a request it could not relay (decision 0262).
const HeaderError = "X-Proxy-Operator-Error"

// The values of HeaderError and of the JSON body's reason.
const (
	ReasonSiteCooling  = "site_cooling"  // every upstream that fits is cooling for the site
	ReasonNoMatch      = "no_match"      // no Proxy matches the selector, or none is healthy
	ReasonAtCapacity   = "at_capacity"   // upstreams fit but are in use (for the site, or full)
	ReasonQueueFull    = "queue_full"    // the site's queue is full, or its pace allowed nothing in time
	ReasonTargetDenied = "target_denied" // the egress policy refuses the target (403, decision 0250)
	ReasonTokenShare   = "token_share"   // the token holds its share of leases in every namespace that fits (429, decision 0259)
	ReasonMemoryShare  = "memory_share"  // the token's requests in flight hold its share of the gateway's memory budget (429, decision 0274)
)

// refusal is a request the gateway answers itself because no upstream could take it: the
// status, the reason header, a Retry-After that is the true earliest time, and a JSON body of
// the same shape as the discovery API's 409.
type refusal struct {
	code   int
	reason string
	body   RefusalBody
	err    error
}

// RefusalBody is the JSON body of a refusal: the discovery API's no-match body and the reason.
type RefusalBody struct {
	client.ErrorBody
	Reason string `json:"reason"`
}

func (r *refusal) Error() string { return r.body.Error }
func (r *refusal) Unwrap() error { return r.err }

// write answers the refusal.
func (r *refusal) write(w http.ResponseWriter) {
	w.Header().Set(HeaderError, r.reason)
	if r.body.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(r.body.RetryAfterSeconds, 10))
	}
	httpx.WriteJSON(w, r.code, r.body)
}

// refuse builds a refusal that may be retried at `at` (zero: after fallback).
func refuse(code int, reason, msg string, now, at time.Time, fallback time.Duration, err error) *refusal {
	wait := fallback
	if !at.IsZero() {
		wait = at.Sub(now)
	}
	r := &refusal{code: code, reason: reason, err: err, body: RefusalBody{Reason: reason, ErrorBody: client.ErrorBody{Error: msg}}}
	if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
		r.body.RetryAfterSeconds = int64(max(1, math.Ceil(wait.Seconds())))
	}
	if !at.IsZero() {
		a := at.UTC()
		r.body.AvailableAt = &a
	}
	return r
}

// leaseError maps the store's refusals to the client's answer. A cooldown's Retry-After is
// its true end (the discovery API's availableAt), however long: a client that honours it
// must not come back every 10 s through a 24 h cooldown.
func (g *Gateway) leaseError(err error) error {
	var nm *lease.NoMatchError
	var tm *lease.TooManyLeasesError
	var rf *refusal
	now := g.Now()
	switch {
	case errors.As(err, &rf):
		return err
	case errors.As(err, &nm):
		var r *refusal
		msg := "no upstream proxy available: " + nm.Reason()
		switch {
		case nm.Matching == 0:
			r = refuse(http.StatusNotFound, ReasonNoMatch, "no Proxy matches the selector of the username: check its pool and attributes", now, time.Time{}, 0, err)
		case nm.Unhealthy == nm.Matching:
			r = refuse(http.StatusServiceUnavailable, ReasonNoMatch, msg, now, time.Time{}, 10*time.Second, err)
		case nm.AtCapacity+nm.LeasedForTarget == 0:
			r = refuse(http.StatusServiceUnavailable, ReasonSiteCooling, msg, now, nm.FreeAt, 10*time.Second, err)
		default:
			// A release can come sooner than FreeAt: at most a second.
			at := nm.FreeAt
			if at.IsZero() || at.Sub(now) > time.Second {
				at = now.Add(time.Second)
			}
			r = refuse(http.StatusServiceUnavailable, ReasonAtCapacity, msg, now, at, time.Second, err)
		}
		r.body.Matching, r.body.Unhealthy, r.body.AtCapacity = nm.Matching, nm.Unhealthy, nm.AtCapacity
		r.body.CoolingForTarget, r.body.LeasedForTarget, r.body.Target = nm.Cooling, nm.LeasedForTarget, nm.Target
		return r
	case errors.As(err, &tm):
		// The token's own share is full: its other requests end within the lease TTL, and a
		// release can come at any moment (at most a second, as for at_capacity).
		at := tm.FreeAt
		if at.IsZero() || at.Sub(now) > time.Second {
			at = now.Add(time.Second)
		}
		return refuse(http.StatusTooManyRequests, ReasonTokenShare, tm.Error(), now, at, time.Second, err)
	case errors.Is(err, lease.ErrUnavailable):
		return &httpx.Error{Code: http.StatusServiceUnavailable, RetryAfter: 1, Err: err,
			Message: "lease store unavailable; retry after the Retry-After seconds"}
	case errors.Is(err, context.Canceled):
		return &httpx.Error{Code: http.StatusServiceUnavailable, RetryAfter: 1, Err: err, Message: "request ended before an upstream was leased"}
	}
	return err
}

// paceError maps the pacer's refusals: the site's queue is full, or no upstream's pace
// allowed the request before its deadline. Retry-After is when the site's first upstream is
// ready again.
func (g *Gateway) paceError(err error, s *sitePace) error {
	if !errors.Is(err, errQueueFull) && !errors.Is(err, errPaceWait) {
		return g.leaseError(err)
	}
	now := g.Now()
	_, at := g.pace.notReady(s, now)
	msg := "the site " + s.name + "'s queue is full: too many requests wait for its pace"
	if errors.Is(err, errPaceWait) {
		msg = "no upstream's pace for " + s.name + " allowed the request within the gateway's queue wait"
	}
	r := refuse(http.StatusServiceUnavailable, ReasonQueueFull, msg, now, at, time.Second, err)
	r.body.Target = s.name
	return r
}
