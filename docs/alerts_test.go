package docs

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestAlertRulesReadDocumentedMetrics: the shipped alerting rules parse, and every
// proxy_operator_ metric they read is one docs/metrics.md lists (so a renamed metric cannot
// silence an alert).
func TestAlertRulesReadDocumentedMetrics(t *testing.T) {
	raw, err := os.ReadFile("../metacontroller/monitoring/vendor-budgets.rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(raw, &f, yaml.DisallowUnknownFields); err != nil {
		t.Fatalf("rules file: %v", err)
	}
	metrics, err := os.ReadFile("metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`proxy_operator_[a-z_]+`)
	alerts := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			alerts++
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("group %s: a rule without alert or expr", g.Name)
			}
			for _, m := range name.FindAllString(r.Expr, -1) {
				if !strings.Contains(string(metrics), "`"+m+"`") {
					t.Errorf("alert %s reads %s, which docs/metrics.md does not list", r.Alert, m)
				}
			}
		}
	}
	if alerts == 0 {
		t.Error("no alerting rule in the file")
	}
}
