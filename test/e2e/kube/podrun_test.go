package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/test"
)

// TestPodConfigServes starts serve as the StatefulSet's pod would: the
// image's command, the ConfigMap's configuration file and the pod's
// environment (status.podIP is 127.0.0.1), each volume mount a directory
// under a temporary root (paths in the file and the environment moved
// with it), the admin Secret a token file. Flags move what a test on a
// shared machine cannot take (flags win over the file and the
// environment): the three listeners to free loopback ports, and the DNS
// name to "localhost" (the headless Service does not resolve here; the
// membership is still DNS, its port still node.advertise's). serve accepts
// the file (it refuses a key it does not know), answers the liveness
// probe's path with {"live": true} and the readiness probe's with the
// Health JSON, ready; the admin endpoint takes the Secret's token; and a
// SIGTERM stops it within terminationGracePeriodSeconds.
func TestPodConfigServes(t *testing.T) {
	c := loadManifests(t)
	bin := serveBinary(t)
	p := readPod(t, c, serveFlags(t, bin))
	root := t.TempDir()

	// Mounts, longest path first so that a nested mount is moved whole.
	mounts := slices.Clone(p.container.VolumeMounts)
	slices.SortFunc(mounts, func(a, b corev1.VolumeMount) int { return len(b.MountPath) - len(a.MountPath) })
	move := func(s string) string {
		for _, m := range mounts {
			s = strings.ReplaceAll(s, m.MountPath, filepath.Join(root, m.MountPath))
		}
		return s
	}
	tokenFile := p.env["ECHOPUBSUB_ADMIN_TOKEN_FILE"].Value
	token := randomToken(t)
	for _, m := range mounts {
		dir := filepath.Join(root, m.MountPath)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		_, v, _ := p.mountOf(m.MountPath)
		switch {
		case v == nil: // a volume claim: an empty directory
		case v.ConfigMap != nil:
			for _, cm := range c.configs {
				if cm.Name != v.ConfigMap.Name {
					continue
				}
				for key, data := range cm.Data {
					writeFile(t, filepath.Join(dir, key), move(data))
				}
			}
		case v.Secret != nil && strings.HasPrefix(tokenFile, m.MountPath+"/"):
			// The Secret is the operator's (docs/server.md): its key is the
			// file ECHOPUBSUB_ADMIN_TOKEN_FILE names.
			writeFile(t, move(tokenFile), token)
		default:
			t.Fatalf("volume %s: no stand-in for it", v.Name)
		}
	}

	var env []string
	vars := map[string]string{}
	for _, e := range p.container.Env {
		val := e.Value
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP":
			val = "127.0.0.1"
		case e.ValueFrom != nil:
			t.Fatalf("variable %s: no stand-in for %v", e.Name, e.ValueFrom)
		}
		for name, v := range vars { // Kubernetes' $(NAME) of an earlier variable
			val = strings.ReplaceAll(val, "$("+name+")", v)
		}
		vars[e.Name] = val
		env = append(env, e.Name+"="+move(val))
	}

	ports, err := proc.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	node, httpAddr, admin := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1]), fmt.Sprintf("127.0.0.1:%d", ports[2])
	argv := []string{bin, "serve"}
	if p.container.Args != nil {
		argv = append([]string{bin}, p.container.Args...)
	}
	argv = append(argv, "--node-listen", node, "--node-advertise", node, "--http-listen", httpAddr,
		"--admin-listen", admin, "--membership-dns-name", "localhost")
	logPath := filepath.Join(root, "serve.log")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := proc.Start(ctx, proc.Spec{Name: "serve", Argv: argv, Env: env, Log: logPath, Group: true, ReadyTimeout: 30 * time.Second})
	showLog := func() string { b, _ := os.ReadFile(logPath); return "serve's log:\n" + string(b) }
	if err != nil {
		t.Fatalf("%v\n%s", err, showLog())
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = srv.Kill()
		}
	})

	probe := func(pr *corev1.Probe, field string) func() bool {
		return func() bool {
			var body map[string]any
			code, err := get("http://"+httpAddr+pr.HTTPGet.Path, "", &body)
			return err == nil && code == http.StatusOK && body[field] == true
		}
	}
	test.Eventually(t, 30*time.Second, probe(p.container.LivenessProbe, "live"),
		func() string {
			return "liveness probe " + p.container.LivenessProbe.HTTPGet.Path + " not 200 live\n" + showLog()
		})
	test.Eventually(t, 30*time.Second, probe(p.container.ReadinessProbe, "ready"),
		func() string {
			return "readiness probe " + p.container.ReadinessProbe.HTTPGet.Path + " not 200 ready\n" + showLog()
		})
	// serve read the ConfigMap's file: its seglog store is where the file
	// puts it, on the volume claim's mount.
	if st, err := os.Stat(move(p.settings["store-path"])); err != nil || !st.IsDir() {
		t.Errorf("no store directory at store.path %s (moved to %s): %v\n%s", p.settings["store-path"], move(p.settings["store-path"]), err, showLog())
	}
	var h map[string]any
	if code, err := get("http://"+admin+"/peers", token, &h); err != nil || code != http.StatusOK {
		t.Errorf("admin /peers with the Secret's token: %d %v", code, err)
	}
	if code, _ := get("http://"+admin+"/peers", "", nil); code != http.StatusUnauthorized {
		t.Errorf("admin /peers without a token: %d, want 401", code)
	}

	grace := time.Duration(derefOr(c.sts.Spec.Template.Spec.TerminationGracePeriodSeconds, 30)) * time.Second
	stopCtx, stopCancel := context.WithTimeout(context.Background(), grace)
	defer stopCancel()
	start := time.Now()
	if err := srv.Stop(stopCtx); err != nil {
		t.Fatalf("SIGTERM: %v (terminationGracePeriodSeconds %v)\n%s", err, grace, showLog())
	}
	stopped = true
	if st := srv.ExitState(); st == nil || !st.Success() {
		t.Errorf("serve exited %v after SIGTERM\n%s", st, showLog())
	}
	t.Logf("stopped in %v (grace %v)", time.Since(start).Round(time.Millisecond), grace)
}

// get GETs url (with a bearer token when given) and decodes a JSON body
// into v (when not nil).
func get(url, token string, v any) (int, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || v == nil {
		return resp.StatusCode, err
	}
	return resp.StatusCode, json.Unmarshal(body, v)
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func randomToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
