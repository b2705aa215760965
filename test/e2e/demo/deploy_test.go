//go:build unix

package demo

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v2"
)

// The operator's files of deploy/: the Prometheus rules (the alerts of
// docs/operations.md) with their promtool unit tests, and the Grafana
// dashboard. TestDemoMetricsAndLogsReadByTools checks every metric they
// name against a running node's /metrics (checkDeployNamesExported).

// deployDir is deploy/ of this checkout (test/e2e/demo is three levels down).
func deployDir(t *testing.T, sub string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "deploy", sub))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// rulesFile is deploy/prometheus/echopubsub-rules.yml as promtool reads it.
type rulesFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert  string `yaml:"alert"`
			Record string `yaml:"record"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// ruleTests is the part of a promtool unit-test file this test reads.
type ruleTests struct {
	Tests []struct {
		Name        string `yaml:"name"`
		InputSeries []struct {
			Series string `yaml:"series"`
		} `yaml:"input_series"`
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []struct {
				ExpLabels map[string]string `yaml:"exp_labels"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// promtool runs promtool in dir and fails the test on a non-zero exit.
func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(findPromtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestPrometheusRulesFireAndStayQuiet: the rules file passes `promtool
// check rules`, and its unit tests pass `promtool test rules`; every alert
// has a test in which it fires for some input series and not for others
// (promtool compares the firing alerts exactly, so the others staying
// quiet is checked by promtool too).
func TestPrometheusRulesFireAndStayQuiet(t *testing.T) {
	dir := deployDir(t, "prometheus")
	promtool(t, dir, "check", "rules", "echopubsub-rules.yml")
	promtool(t, dir, "test", "rules", "echopubsub-rules_test.yml")

	var rules rulesFile
	readYAML(t, filepath.Join(dir, "echopubsub-rules.yml"), &rules)
	var tests ruleTests
	readYAML(t, filepath.Join(dir, "echopubsub-rules_test.yml"), &tests)
	instance := regexp.MustCompile(`instance="([^"]*)"`)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		inputs := map[string]bool{}
		for _, s := range tc.InputSeries {
			if m := instance.FindStringSubmatch(s.Series); m != nil {
				inputs[m[1]] = true
			}
		}
		for _, at := range tc.AlertRuleTest {
			fired := map[string]bool{}
			for _, a := range at.ExpAlerts {
				fired[a.ExpLabels["instance"]] = true
			}
			if len(fired) > 0 {
				fires[at.Alertname] = true
			}
			for in := range inputs {
				if !fired[in] {
					quiet[at.Alertname] = true
				}
			}
		}
	}
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if !fires[r.Alert] || !quiet[r.Alert] {
				t.Errorf("alert %s: want a unit test with series that fire it (%v) and series that do not (%v)", r.Alert, fires[r.Alert], quiet[r.Alert])
			}
		}
	}
	if alerts == 0 {
		t.Fatal("the rules file has no alert")
	}
}

// dashboard is the part of the Grafana dashboard JSON this test reads.
type dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID      int     `json:"id"`
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"` // a collapsed row's
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// readDashboard decodes deploy/grafana/echopubsub.json and returns it with
// every PromQL expression of its panels, by "panel title/refId".
func readDashboard(t *testing.T) (dashboard, map[string]string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir(t, "grafana"), "echopubsub.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("the dashboard is not valid JSON: %v", err)
	}
	exprs := map[string]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				exprs[p.Title+"/"+tg.RefID] = tg.Expr
			}
		}
	}
	walk(d.Panels)
	return d, exprs
}

// grafanaVars are the dashboard's variables as Prometheus sees them once
// Grafana substituted them (All is ".*").
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "${datasource}", "", "$pubsub", ".*", "$instance", ".*")

// TestGrafanaDashboardQueries: the dashboard is Grafana JSON with a
// schemaVersion, a data source, pubsub and instance variables and a query
// on every panel, and every query is PromQL that promtool accepts (each
// becomes a recording rule of a rules file for `promtool check rules`).
func TestGrafanaDashboardQueries(t *testing.T) {
	d, exprs := readDashboard(t)
	if d.SchemaVersion <= 0 || d.UID == "" || d.Title == "" {
		t.Errorf("the dashboard wants a schemaVersion, uid and title: %d %q %q", d.SchemaVersion, d.UID, d.Title)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	for name, typ := range map[string]string{"datasource": "datasource", "pubsub": "query", "instance": "query"} {
		if vars[name] != typ {
			t.Errorf("dashboard variable %s: type %q, want %q", name, vars[name], typ)
		}
	}
	if len(exprs) == 0 {
		t.Fatal("the dashboard has no query")
	}
	keys := make([]string, 0, len(exprs))
	for k := range exprs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	attrs := documentedFamilies(t)
	for i, k := range keys {
		e := exprs[k]
		filters := []string{"$instance"}
		for _, n := range promqlNames(e) {
			if attrs[strings.TrimSuffix(n, "_bucket")]["pubsub"] {
				filters = append(filters, "$pubsub") // not recovery_cut's: its store opens before any pubsub
			}
		}
		for _, v := range filters {
			if !strings.Contains(e, v) {
				t.Errorf("query %s does not filter by %s: %s", k, v, e)
			}
		}
		q, _ := json.Marshal(grafanaVars.Replace(e)) // a JSON string is a YAML string
		fmt.Fprintf(&rules, "      - record: dashboard:query_%d\n        expr: %s\n", i, q)
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, filepath.Dir(path), "check", "rules", filepath.Base(path))
}

// promqlNames lists the metric names an expression selects: identifiers
// outside strings, label matchers ({...}), ranges ([...]) and grouping
// label lists (by/without/on/ignoring/group_left/group_right (...)) that
// are not a function, an aggregation or a keyword.
func promqlNames(expr string) []string {
	keywords := map[string]bool{}
	for _, k := range strings.Fields("and or unless by without on ignoring group_left group_right offset bool " +
		"sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio inf nan") {
		keywords[k] = true
	}
	grouping := map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	isStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }
	skipTo := func(i int, close byte) int { // index after the closing byte, strings inside skipped
		for i < len(expr) && expr[i] != close {
			if q := expr[i]; q == '"' || q == '\'' || q == '`' {
				for i++; i < len(expr) && expr[i] != q; i++ {
					if expr[i] == '\\' && q != '`' {
						i++
					}
				}
			}
			i++
		}
		return i + 1
	}
	var names []string
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '{':
			i = skipTo(i+1, '}')
		case c == '[':
			i = skipTo(i+1, ']')
		case c == '"' || c == '\'' || c == '`':
			i++
			for i < len(expr) && expr[i] != c {
				if expr[i] == '\\' && c != '`' {
					i++
				}
				i++
			}
			i++
		case c >= '0' && c <= '9' || c == '.': // a number or a duration (1h, 0.5, 1e3)
			for i < len(expr) && (isPart(expr[i]) || expr[i] == '.') {
				i++
			}
		case isStart(c):
			j := i
			for j < len(expr) && isPart(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\n' || expr[k] == '\t') {
				k++
			}
			call := k < len(expr) && expr[k] == '('
			switch {
			case grouping[word] && call:
				j = skipTo(k+1, ')')
			case keywords[strings.ToLower(word)] || call:
			default:
				names = append(names, word)
			}
			i = j
		default:
			i++
		}
	}
	return names
}

// TestPromQLNames: promqlNames finds the selected metrics of the
// expressions the deploy files use, and nothing else.
func TestPromQLNames(t *testing.T) {
	for expr, want := range map[string]string{
		`increase(a_total[5m]) > 0`: "a_total",
		`histogram_quantile(0.99, sum by (job, le) (rate(h_bucket{x="y}{"}[5m]))) > 1`:                          "h_bucket",
		"increase(c[1h]) > 0\nor (c > 0 unless c offset 1h)":                                                    "c c c",
		`sum by (instance) (rate(s{pubsub=~"$pubsub"}[5m])) / sum without (le) (rate(t_count[5m])) > 0.8 * 2e6`: "s t_count",
		`max_over_time(g[10m]) > bool 0 and on (instance) group_left (peer) k`:                                  "g k",
		`sum(x) by (peer)`: "x",
	} {
		if got := strings.Join(promqlNames(expr), " "); got != want {
			t.Errorf("promqlNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

// noSeriesUntilEvent are the families a node that just started does not
// export (each row of the docs/operations.md metrics table says when its
// series appear), with their Prometheus type: named by the dashboard or
// rules, they must be in that table, and
// TestNoSeriesUntilEventFamiliesAsPrometheusNamesThem makes each one's
// event happen and finds the name in the export.
var noSeriesUntilEvent = map[string]string{
	// Recorded by store/seglog's Open when it cuts a torn tail or repairs
	// a log; the demo's ScoreBoard has no store.
	"echopubsub_store_recovery_cut_bytes_total": "COUNTER",
	// Recorded once a session subscribes WithConsumer (a named durable
	// consumer): the demo has none.
	"echopubsub_consumer_commits_total": "COUNTER",
	"echopubsub_consumer_unacked":       "GAUGE",
}

// documentedFamilies are the Prometheus names of the metrics table in
// docs/operations.md, each with its attributes (pubsub, group, peer, ...).
func documentedFamilies(t *testing.T) map[string]map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `[a-z_.]+` \\| `([a-z_:]+)` \\| [^|]+ \\| ([^|]+) \\|")
	names := map[string]map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		names[m[1]] = map[string]bool{}
		for _, a := range strings.Split(m[2], ",") {
			if f := strings.Fields(a); len(f) > 0 {
				names[m[1]][f[0]] = true
			}
		}
	}
	if len(names) == 0 {
		t.Fatal("docs/operations.md has no metrics table")
	}
	return names
}

// checkDeployNamesExported checks every metric the rules and the
// dashboard name against the families of pages (nodes' /metrics): each is
// a family a node exports (a histogram's _bucket, _sum and _count count as
// its family), or one in noSeriesUntilEvent, which the operations table
// must document. And the other way: every family of the operations table
// is exported or in noSeriesUntilEvent, and every echopubsub family
// exported is in the table, so that list holds only what it says.
func checkDeployNamesExported(t *testing.T, pages []string) {
	t.Helper()
	typeLine := regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`)
	exported := map[string]string{}
	for _, page := range pages {
		for _, m := range typeLine.FindAllStringSubmatch(page, -1) {
			exported[m[1]] = m[2]
		}
	}
	documented := documentedFamilies(t)
	family := func(name string) (string, bool) {
		if _, ok := exported[name]; ok {
			return name, true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && exported[base] == "histogram" {
				return base, true
			}
		}
		if noSeriesUntilEvent[name] != "" && documented[name] != nil {
			return name, true
		}
		return "", false
	}

	var rules rulesFile
	readYAML(t, filepath.Join(deployDir(t, "prometheus"), "echopubsub-rules.yml"), &rules)
	named := map[string][]string{} // metric -> where
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			for _, n := range promqlNames(r.Expr) {
				named[n] = append(named[n], "rule "+r.Alert+r.Record)
			}
		}
	}
	_, exprs := readDashboard(t)
	for where, e := range exprs {
		for _, n := range promqlNames(e) {
			named[n] = append(named[n], "dashboard "+where)
		}
	}
	if len(named) == 0 {
		t.Fatal("the rules and the dashboard name no metric")
	}
	used := map[string]bool{}
	for n, where := range named {
		f, ok := family(n)
		if !ok {
			t.Errorf("%s names %s, which no node exports (nor is it documented as having no series until an event)", strings.Join(where, ", "), n)
		}
		used[f] = true
	}
	for name := range documented {
		if _, ok := family(name); !ok {
			t.Errorf("docs/operations.md lists %s, which the nodes do not export (if it has no series until an event, add it to noSeriesUntilEvent)", name)
		}
	}
	for name := range exported {
		if (strings.HasPrefix(name, "echopubsub_") || strings.HasPrefix(name, "messaging_")) && documented[name] == nil {
			t.Errorf("the nodes export %s, which docs/operations.md's metrics table does not list", name)
		}
	}
	for name := range documented {
		if !used[name] {
			t.Errorf("docs/operations.md lists %s, which neither the dashboard nor the rules use", name)
		}
	}
	t.Logf("the rules and the dashboard name %d metrics; the nodes export %d families", len(named), len(exported))
}
