// Package ec2test owns a local stand-in for the subset of the EC2 query API the aws provider
// uses (RunInstances with client tokens, DescribeInstances with IDs, filters and pages,
// TerminateInstances), keeping instances in memory with a clock that moves them through
// pending, running, shutting-down and terminated, and injecting EC2's own error answers. Tests
// point the real AWS SDK at it; it knows nothing of the providers contract.
package ec2test

import (
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Static credentials the stand-in accepts: the SDK must sign with them.
const (
	AccessKeyID     = "AKIAPROXYOPERATOR01"
	SecretAccessKey = "proxy-operator-test-secret"
	ownerID         = "123456789012"
)

// Delays of the instance lifecycle, on the stand-in's clock.
const (
	ProvisionDelay = 20 * time.Second
	ShutdownDelay  = 30 * time.Second
)

// maxBody bounds a request body (EC2's own limit on user-data is 16 KiB, base64 inflates it).
const maxBody = 256 << 10

// Instance is one instance as the stand-in stores it.
type Instance struct {
	ID           string
	ImageID      string
	InstanceType string
	Zone         string
	ClientToken  string
	UserData     string // decoded
	Spot         bool
	SubnetID     string
	Groups       []string
	Tags         map[string]string
	Launched     time.Time
	// Terminating is when termination began (a call, or the cloud's own: a spot interruption).
	Terminating time.Time
	IP          string
}

// State is the instance's EC2 state name at now.
func (in *Instance) State(now time.Time) string {
	switch {
	case !in.Terminating.IsZero() && !now.Before(in.Terminating.Add(ShutdownDelay)):
		return "terminated"
	case !in.Terminating.IsZero():
		return "shutting-down"
	case now.Before(in.Launched.Add(ProvisionDelay)):
		return "pending"
	default:
		return "running"
	}
}

// Call is one request the stand-in answered.
type Call struct {
	Action string
	Params url.Values
}

type fault struct {
	action, code  string
	status, count int
}

// Server is the stand-in. Its zero value is not usable; call New.
type Server struct {
	// URL is the endpoint to give the SDK (config.WithBaseEndpoint).
	URL string
	srv *httptest.Server
	now func() time.Time

	mu        sync.Mutex
	instances map[string]*Instance
	order     []string
	tokens    map[string]tokenUse
	faults    []fault
	calls     []Call
	seq       int
	pageSize  int
	hold      chan struct{}
}

type tokenUse struct{ id, params string }

// New starts a stand-in whose lifecycle follows now (time.Now when nil). Close it.
func New(now func() time.Time) *Server {
	if now == nil {
		now = time.Now
	}
	s := &Server{now: now, instances: map[string]*Instance{}, tokens: map[string]tokenUse{}, pageSize: 1000}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Close releases held requests and stops the server.
func (s *Server) Close() {
	s.Release()
	s.srv.Close()
}

// SetPageSize makes DescribeInstances answer at most n instances a page.
func (s *Server) SetPageSize(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pageSize = max(1, n)
}

// Fail makes the next count calls of action (RunInstances, DescribeInstances,
// TerminateInstances) answer EC2's error code with HTTP status.
func (s *Server) Fail(action, code string, status, count int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, fault{action, code, status, max(1, count)})
}

// ArmedFaults is how many injected failures are still to be answered.
func (s *Server) ArmedFaults() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, f := range s.faults {
		n += f.count
	}
	return n
}

// ClearFaults disarms every injected failure (the outage ends).
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// Hold makes every request wait until Release (or until its client gives up).
func (s *Server) Hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hold == nil {
		s.hold = make(chan struct{})
	}
}

// Release lets held requests answer.
func (s *Server) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hold != nil {
		close(s.hold)
		s.hold = nil
	}
}

// Calls returns the requests answered so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Instances returns a copy of every instance, in launch order, terminated ones included.
func (s *Server) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Instance, 0, len(s.order))
	for _, id := range s.order {
		in := *s.instances[id]
		in.Tags = maps.Clone(in.Tags)
		out = append(out, in)
	}
	return out
}

// Now is the stand-in's clock.
func (s *Server) Now() time.Time { return s.now() }

// Terminate ends an instance as the cloud does on its own (a spot interruption).
func (s *Server) Terminate(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[id]
	if ok && in.Terminating.IsZero() {
		in.Terminating = s.now()
	}
	return ok
}

// Put stores an instance as it is (a machine an older operator made), replacing one with its ID.
func (s *Server) Put(in Instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.instances[in.ID]; !ok {
		s.order = append(s.order, in.ID)
	}
	in.Tags = maps.Clone(in.Tags)
	s.instances[in.ID] = &in
}

// apiError is an EC2 error answer.
type apiError struct {
	status        int
	code, message string
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		writeError(w, apiError{http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", "request body too large or unreadable"})
		return
	}
	params, err := url.ParseQuery(string(body))
	if err != nil || r.Method != http.MethodPost {
		writeError(w, apiError{http.StatusBadRequest, "MalformedQueryString", "want a POST of a form"})
		return
	}
	// The SDK signs every request (SigV4) with the credentials it was given.
	if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential="+AccessKeyID+"/") {
		writeError(w, apiError{http.StatusUnauthorized, "AuthFailure", "AWS was not able to validate the provided access credentials"})
		return
	}
	action := params.Get("Action")
	s.mu.Lock()
	s.calls = append(s.calls, Call{Action: action, Params: params})
	hold := s.hold
	s.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.takeFault(action); f != nil {
		writeError(w, apiError{f.status, f.code, "injected " + f.code})
		return
	}
	var resp any
	var aerr *apiError
	switch action {
	case "RunInstances":
		resp, aerr = s.run(params)
	case "DescribeInstances":
		resp, aerr = s.describe(params)
	case "TerminateInstances":
		resp, aerr = s.terminate(params)
	default:
		aerr = &apiError{http.StatusBadRequest, "InvalidAction", "the action " + action + " is not valid for this web service"}
	}
	if aerr != nil {
		writeError(w, *aerr)
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	_, _ = io.WriteString(w, xml.Header)
	// An encoding error leaves a truncated body, which the SDK reports as the call's error.
	_ = xml.NewEncoder(w).Encode(resp)
}

func (s *Server) takeFault(action string) *fault {
	for i := range s.faults {
		f := s.faults[i]
		if f.action != action {
			continue
		}
		if f.count <= 1 {
			s.faults = slices.Delete(s.faults, i, i+1)
		} else {
			s.faults[i].count--
		}
		return &f
	}
	return nil
}

func writeError(w http.ResponseWriter, e apiError) {
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(e.status)
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(e.message))
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>%s</Code><Message>%s</Message></Error></Errors><RequestID>7a62c49f-347e-4fc4-9331-6e8eEXAMPLE</RequestID></Response>`, e.code, b.String())
}

var (
	amiRE        = regexp.MustCompile(`^ami-[0-9a-f]{8,17}$`)
	instanceIDRE = regexp.MustCompile(`^i-[0-9a-f]{8,17}$`)
)

// indexed collects the values of "prefix.N" (or "prefix.N.suffix") keys, in N order.
func indexed(params url.Values, prefix, suffix string) []string {
	type kv struct {
		n int
		v string
	}
	var got []kv
	for k, vs := range params {
		rest, ok := strings.CutPrefix(k, prefix+".")
		if !ok {
			continue
		}
		num, tail, _ := strings.Cut(rest, ".")
		if tail != suffix {
			continue
		}
		n, err := strconv.Atoi(num)
		if err != nil {
			continue
		}
		got = append(got, kv{n, vs[0]})
	}
	slices.SortFunc(got, func(a, b kv) int { return a.n - b.n })
	out := make([]string, len(got))
	for i, g := range got {
		out[i] = g.v
	}
	return out
}

func (s *Server) run(p url.Values) (any, *apiError) {
	if !amiRE.MatchString(p.Get("ImageId")) {
		return nil, &apiError{http.StatusBadRequest, "InvalidAMIID.Malformed", "Invalid id: \"" + p.Get("ImageId") + "\""}
	}
	if p.Get("InstanceType") == "" || p.Get("MinCount") != "1" || p.Get("MaxCount") != "1" {
		return nil, &apiError{http.StatusBadRequest, "InvalidParameterValue", "InstanceType, MinCount=1 and MaxCount=1 are required here"}
	}
	token := p.Get("ClientToken")
	if len(token) > 64 {
		return nil, &apiError{http.StatusBadRequest, "InvalidParameterValue", "client token longer than 64"}
	}
	sig := signature(p)
	if use, ok := s.tokens[token]; ok && token != "" {
		if use.params != sig {
			return nil, &apiError{http.StatusBadRequest, "IdempotentParameterMismatch", "The client token " + token + " was used with other parameters"}
		}
		return s.reservation(s.instances[use.id]), nil
	}
	ud, err := base64.StdEncoding.DecodeString(p.Get("UserData"))
	if err != nil {
		return nil, &apiError{http.StatusBadRequest, "InvalidUserData.Malformed", "User data is not base64"}
	}
	if len(ud) > 16<<10 {
		return nil, &apiError{http.StatusBadRequest, "InvalidParameterValue", "User data is limited to 16384 bytes"}
	}
	s.seq++
	in := &Instance{
		ID:           fmt.Sprintf("i-%017x", 0xa000000+s.seq),
		ImageID:      p.Get("ImageId"),
		InstanceType: p.Get("InstanceType"),
		Zone:         p.Get("Placement.AvailabilityZone"),
		ClientToken:  token,
		UserData:     string(ud),
		Spot:         p.Get("InstanceMarketOptions.MarketType") == "spot",
		SubnetID:     p.Get("NetworkInterface.1.SubnetId"),
		Groups:       indexed(p, "NetworkInterface.1.SecurityGroupId", ""),
		Tags:         map[string]string{},
		Launched:     s.now().UTC().Truncate(time.Second),
		IP:           fmt.Sprintf("127.2.%d.%d", s.seq/250%250, 1+s.seq%250),
	}
	if in.Zone == "" {
		in.Zone = "eu-central-1a"
	}
	for i, typ := range indexed(p, "TagSpecification", "ResourceType") {
		if typ != "instance" {
			continue
		}
		prefix := fmt.Sprintf("TagSpecification.%d.Tag", i+1)
		keys, values := indexed(p, prefix, "Key"), indexed(p, prefix, "Value")
		for j := range min(len(keys), len(values)) {
			in.Tags[keys[j]] = values[j]
		}
	}
	s.instances[in.ID] = in
	s.order = append(s.order, in.ID)
	if token != "" {
		s.tokens[token] = tokenUse{in.ID, sig}
	}
	return s.reservation(in), nil
}

// signature is the request's parameters but its token, as EC2 compares them.
func signature(p url.Values) string {
	q := maps.Clone(p)
	delete(q, "ClientToken")
	return q.Encode()
}

func (s *Server) reservation(in *Instance) runResponse {
	return runResponse{Xmlns: xmlns, RequestID: "run-" + in.ID, ReservationID: "r-" + in.ID[2:], OwnerID: ownerID, Instances: []xmlInstance{s.view(in)}}
}

func (s *Server) describe(p url.Values) (any, *apiError) {
	ids := indexed(p, "InstanceId", "")
	for _, id := range ids {
		if !instanceIDRE.MatchString(id) {
			return nil, &apiError{http.StatusBadRequest, "InvalidInstanceID.Malformed", "Invalid id: \"" + id + "\""}
		}
		if _, ok := s.instances[id]; !ok {
			return nil, &apiError{http.StatusBadRequest, "InvalidInstanceID.NotFound", "The instance ID '" + id + "' does not exist"}
		}
	}
	names := indexed(p, "Filter", "Name")
	filters := make(map[string][]string, len(names))
	for i, n := range names {
		filters[n] = indexed(p, fmt.Sprintf("Filter.%d.Value", i+1), "")
	}
	now := s.now()
	var match []*Instance
	for _, id := range s.order {
		in := s.instances[id]
		if len(ids) > 0 && !slices.Contains(ids, id) {
			continue
		}
		ok := true
		for name, values := range filters {
			var v string
			switch {
			case strings.HasPrefix(name, "tag:"):
				v = in.Tags[strings.TrimPrefix(name, "tag:")]
				if _, has := in.Tags[strings.TrimPrefix(name, "tag:")]; !has {
					ok = false
				}
			case name == "instance-state-name":
				v = in.State(now)
			case name == "client-token":
				v = in.ClientToken
			default:
				return nil, &apiError{http.StatusBadRequest, "InvalidParameterValue", "The filter '" + name + "' is invalid"}
			}
			ok = ok && slices.Contains(values, v)
		}
		if ok {
			match = append(match, in)
		}
	}
	size := s.pageSize
	if m, err := strconv.Atoi(p.Get("MaxResults")); err == nil && m > 0 {
		if len(ids) > 0 {
			return nil, &apiError{http.StatusBadRequest, "InvalidParameterCombination", "MaxResults and InstanceId cannot be combined"}
		}
		size = min(size, m)
	}
	start := 0
	if t := p.Get("NextToken"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 || n > len(match) {
			return nil, &apiError{http.StatusBadRequest, "InvalidParameterValue", "bad NextToken"}
		}
		start = n
	}
	end := min(len(match), start+size)
	resp := describeResponse{Xmlns: xmlns, RequestID: "describe"}
	// One reservation per instance, as one RunInstances each made.
	for _, in := range match[start:end] {
		resp.Reservations = append(resp.Reservations, xmlReservation{ReservationID: "r-" + in.ID[2:], OwnerID: ownerID, Instances: []xmlInstance{s.view(in)}})
	}
	if end < len(match) {
		resp.NextToken = strconv.Itoa(end)
	}
	return resp, nil
}

func (s *Server) terminate(p url.Values) (any, *apiError) {
	ids := indexed(p, "InstanceId", "")
	if len(ids) == 0 {
		return nil, &apiError{http.StatusBadRequest, "MissingParameter", "InstanceId is required"}
	}
	resp := terminateResponse{Xmlns: xmlns, RequestID: "terminate"}
	now := s.now()
	for _, id := range ids {
		if !instanceIDRE.MatchString(id) {
			return nil, &apiError{http.StatusBadRequest, "InvalidInstanceID.Malformed", "Invalid id: \"" + id + "\""}
		}
		in, ok := s.instances[id]
		if !ok {
			return nil, &apiError{http.StatusBadRequest, "InvalidInstanceID.NotFound", "The instance ID '" + id + "' does not exist"}
		}
		prev := in.State(now)
		if in.Terminating.IsZero() {
			in.Terminating = now
		}
		resp.Items = append(resp.Items, stateChange{InstanceID: id, Current: stateOf(in.State(now)), Previous: stateOf(prev)})
	}
	return resp, nil
}

var stateCodes = map[string]int{"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}

func stateOf(name string) xmlState { return xmlState{Code: stateCodes[name], Name: name} }

func (s *Server) view(in *Instance) xmlInstance {
	st := in.State(s.now())
	x := xmlInstance{
		InstanceID: in.ID, ImageID: in.ImageID, InstanceType: in.InstanceType, State: stateOf(st),
		LaunchTime: in.Launched.Format(time.RFC3339), Zone: in.Zone, ClientToken: in.ClientToken, SubnetID: in.SubnetID,
	}
	if st == "running" {
		x.IPAddress = in.IP
	}
	if in.Spot {
		x.Lifecycle = "spot"
	}
	for _, k := range slices.Sorted(maps.Keys(in.Tags)) {
		x.Tags = append(x.Tags, xmlTag{k, in.Tags[k]})
	}
	return x
}

const xmlns = "http://ec2.amazonaws.com/doc/2016-11-15/"

type xmlState struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type xmlTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type xmlInstance struct {
	InstanceID   string   `xml:"instanceId"`
	ImageID      string   `xml:"imageId"`
	State        xmlState `xml:"instanceState"`
	InstanceType string   `xml:"instanceType"`
	LaunchTime   string   `xml:"launchTime"`
	Zone         string   `xml:"placement>availabilityZone"`
	SubnetID     string   `xml:"subnetId,omitempty"`
	IPAddress    string   `xml:"ipAddress,omitempty"`
	ClientToken  string   `xml:"clientToken,omitempty"`
	Lifecycle    string   `xml:"instanceLifecycle,omitempty"`
	Tags         []xmlTag `xml:"tagSet>item"`
}

type runResponse struct {
	XMLName       xml.Name      `xml:"RunInstancesResponse"`
	Xmlns         string        `xml:"xmlns,attr"`
	RequestID     string        `xml:"requestId"`
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Instances     []xmlInstance `xml:"instancesSet>item"`
}

type xmlReservation struct {
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Instances     []xmlInstance `xml:"instancesSet>item"`
}

type describeResponse struct {
	XMLName      xml.Name         `xml:"DescribeInstancesResponse"`
	Xmlns        string           `xml:"xmlns,attr"`
	RequestID    string           `xml:"requestId"`
	Reservations []xmlReservation `xml:"reservationSet>item"`
	NextToken    string           `xml:"nextToken,omitempty"`
}

type stateChange struct {
	InstanceID string   `xml:"instanceId"`
	Current    xmlState `xml:"currentState"`
	Previous   xmlState `xml:"previousState"`
}

type terminateResponse struct {
	XMLName   xml.Name      `xml:"TerminateInstancesResponse"`
	Xmlns     string        `xml:"xmlns,attr"`
	RequestID string        `xml:"requestId"`
	Items     []stateChange `xml:"instancesSet>item"`
}
