package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/echopubsub/echopubsub"
)

// client is what the inspecting commands share: where the admin endpoint
// is, how to authenticate, and the output form.
type client struct {
	url, token, tokenFile string
	ca, cert, key         string
	json                  bool

	stdout, stderr io.Writer
	// terminal reports whether stderr is a terminal (replay's progress bar).
	terminal func() bool
}

// clientEnv are the variables the client's flags default to. The token's
// are serve's own (admin.token, admin.token_file): in a node's container
// the commands find the token the node was given.
var clientEnv = map[string]string{
	"url": "ECHOPUBSUB_ADMIN_URL", "token": "ECHOPUBSUB_ADMIN_TOKEN", "token-file": "ECHOPUBSUB_ADMIN_TOKEN_FILE",
	"ca": "ECHOPUBSUB_ADMIN_CA", "cert": "ECHOPUBSUB_ADMIN_CLIENT_CERT", "key": "ECHOPUBSUB_ADMIN_CLIENT_KEY",
}

func envOr(name, def string) string {
	if v := os.Getenv(clientEnv[name]); v != "" {
		return v
	}
	return def
}

// addFlags declares the client's flags on cmd.
func (c *client) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&c.url, "url", envOr("url", "http://127.0.0.1:7401"), "the node's admin endpoint ("+clientEnv["url"]+")")
	f.StringVar(&c.token, "token", envOr("token", ""), "admin bearer token ("+clientEnv["token"]+")")
	f.StringVar(&c.tokenFile, "token-file", envOr("token-file", ""), "file holding the admin bearer token ("+clientEnv["token-file"]+")")
	f.StringVar(&c.ca, "ca", envOr("ca", ""), "PEM CA that signed the admin endpoint's certificate, for https ("+clientEnv["ca"]+")")
	f.StringVar(&c.cert, "cert", envOr("cert", ""), "PEM client certificate, for mTLS ("+clientEnv["cert"]+")")
	f.StringVar(&c.key, "key", envOr("key", ""), "PEM key of --cert ("+clientEnv["key"]+")")
	f.BoolVar(&c.json, "json", false, "print JSON (one object; JSON lines for tail and replay) for scripts")
}

// command builds one client command.
func (c *client) command(use, short string, args cobra.PositionalArgs, run func(cmd *cobra.Command, args []string) error) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Args: args, RunE: func(cmd *cobra.Command, a []string) error {
		c.stdout, c.stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
		if c.terminal == nil {
			c.terminal = func() bool { return isTerminal(os.Stderr) }
		}
		return run(cmd, a)
	}}
	c.addFlags(cmd)
	return cmd
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// httpClient is the client for the admin endpoint, with TLS when asked.
func (c *client) httpClient() (*http.Client, error) {
	if c.ca == "" && c.cert == "" && c.key == "" {
		return &http.Client{}, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.ca != "" {
		pem, err := os.ReadFile(c.ca)
		if err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca: %q holds no PEM certificate", c.ca)
		}
	}
	if c.cert != "" || c.key != "" {
		pair, err := tls.LoadX509KeyPair(c.cert, c.key)
		if err != nil {
			return nil, fmt.Errorf("--cert %q with --key %q: %w", c.cert, c.key, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}, nil
}

// do sends one request to the admin endpoint. A non-2xx answer is an
// error carrying the endpoint's message.
func (c *client) do(cmd *cobra.Command, method, path string, q url.Values, body io.Reader) (*http.Response, error) {
	token := c.token
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	u, err := url.Parse(c.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--url: %q is not an http:// or https:// URL", c.url)
	}
	u = u.JoinPath(path)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(cmd.Context(), method, u.String(), body)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc, err := c.httpClient()
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		var e struct {
			Error string `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		return nil, fmt.Errorf("%s %s: %s: %s", method, u.Path, resp.Status, e.Error)
	}
	return resp, nil
}

// getJSON decodes a JSON answer into v; with --json it prints it as is.
func (c *client) getJSON(cmd *cobra.Command, path string, v any) (printed bool, err error) {
	resp, err := c.do(cmd, http.MethodGet, path, nil, nil)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return false, err
	}
	if c.json {
		_, err = c.stdout.Write(b)
		return true, err
	}
	return false, json.Unmarshal(b, v)
}

func (c *client) table(header string, rows [][]string) error {
	tw := tabwriter.NewWriter(c.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// ago prints a duration for people, to the millisecond.
func ago(d time.Duration) string { return d.Round(time.Millisecond).String() }

func (c *client) peersCommand() *cobra.Command {
	return c.command("peers", "Each peer of the node: registered, lag, last ack, stalled", cobra.NoArgs,
		func(cmd *cobra.Command, _ []string) error {
			var h echopubsub.Health
			if printed, err := c.getJSON(cmd, "peers", &h); printed || err != nil {
				return err
			}
			var rows [][]string
			for _, p := range h.Peers {
				lag := strconv.FormatUint(p.Lag, 10)
				if p.LagUnknown {
					lag = "<=" + lag
				}
				last := "never"
				if p.LastAckAge >= 0 {
					last = ago(p.LastAckAge) + " ago"
				}
				stalled := yesNo(p.Stalled)
				if p.StallReason != "" {
					stalled += " (" + p.StallReason + ")"
				}
				rows = append(rows, []string{p.Node, yesNo(p.Registered), lag, last, strconv.Itoa(p.Failures), strconv.Itoa(p.Expirations), stalled})
			}
			fmt.Fprintf(c.stdout, "node %s ready=%s\n", h.Node, yesNo(h.Ready))
			return c.table("PEER\tREGISTERED\tLAG\tLAST ACK\tFAILURES\tEXPIRED\tSTALLED", rows)
		})
}

func (c *client) streamsCommand() *cobra.Command {
	return c.command("streams", "The node's durable streams: first and last cursor, rows, bytes, retention", cobra.NoArgs,
		func(cmd *cobra.Command, _ []string) error {
			var s echopubsub.AdminStreams
			if printed, err := c.getJSON(cmd, "streams", &s); printed || err != nil {
				return err
			}
			if s.Store == "" {
				fmt.Fprintf(c.stdout, "node %s has no store (no durable topics)\n", s.Node)
				return nil
			}
			var rows [][]string
			for _, st := range s.Streams {
				rows = append(rows, []string{st.Stream, strconv.FormatUint(st.First, 10), strconv.FormatUint(st.Last, 10),
					strconv.FormatUint(st.Rows, 10), strconv.FormatUint(st.Bytes, 10), s.Retention.Text})
			}
			fmt.Fprintf(c.stdout, "node %s store %s shared=%s\n", s.Node, s.Store, yesNo(s.Shared))
			return c.table("STREAM\tFIRST\tLAST\tROWS\tBYTES\tRETENTION", rows)
		})
}

func (c *client) sessionsCommand() *cobra.Command {
	return c.command("sessions", "The node's sessions: owner identity, pending, quiet since last ack, stalled, waiting for room", cobra.NoArgs,
		func(cmd *cobra.Command, _ []string) error {
			var s struct {
				Node     string                    `json:"node"`
				Sessions []echopubsub.AdminSession `json:"sessions"`
			}
			if printed, err := c.getJSON(cmd, "sessions", &s); printed || err != nil {
				return err
			}
			var rows [][]string
			for _, x := range s.Sessions {
				quiet := "-"
				if x.Quiet > 0 {
					quiet = ago(x.Quiet)
				}
				rows = append(rows, []string{x.ID, x.Identity, strconv.Itoa(x.Pending), quiet, yesNo(x.Stalled), yesNo(x.Waiting)})
			}
			fmt.Fprintf(c.stdout, "node %s\n", s.Node)
			return c.table("SESSION\tIDENTITY\tPENDING\tNO ACK FOR\tSTALLED\tWAITING", rows)
		})
}

// eachLine reads the admin endpoint's JSON lines, handing each to fn with
// its raw bytes.
func eachLine(r io.Reader, fn func(raw []byte, line echopubsub.AdminLine) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		var line echopubsub.AdminLine
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return fmt.Errorf("admin endpoint sent %q: %w", sc.Text(), err)
		}
		if line.Kind == "error" {
			return errors.New(line.Reason)
		}
		if err := fn(sc.Bytes(), line); err != nil {
			return err
		}
	}
	return sc.Err()
}

// human prints one tail or replay line for people.
func human(line echopubsub.AdminLine) string {
	switch line.Kind {
	case "subscribed":
		if line.From > 0 {
			return fmt.Sprintf("tailing %s from cursor %d", line.Topic, line.From)
		}
		return "tailing " + line.Topic
	case "notice":
		return fmt.Sprintf("NOTICE %s %s", line.Type, line.Notice)
	case "gap":
		return fmt.Sprintf("#%d GAP from %s: %d missed (%s)", line.Cursor, line.Origin, line.Missed, line.Reason)
	}
	payload := string(line.Payload)
	if payload == "" {
		payload = "base64:" + line.PayloadBase64
	}
	where := line.Topic
	if line.Kind == "row" {
		where = line.Stream
	}
	if line.Cursor > 0 {
		where += fmt.Sprintf(" #%d", line.Cursor)
	}
	return fmt.Sprintf("%s %s %s", where, line.Type, payload)
}

func (c *client) tailCommand() *cobra.Command {
	var from, count uint64
	cmd := c.command("tail TOPIC", "Print a topic's live messages and every notice (--from N: a durable stream from cursor N first)",
		cobra.ExactArgs(1), func(cmd *cobra.Command, args []string) error {
			q := url.Values{"topic": {args[0]}}
			if cmd.Flags().Changed("from") {
				q.Set("from", strconv.FormatUint(from, 10))
			}
			if count > 0 {
				q.Set("count", strconv.FormatUint(count, 10))
			}
			resp, err := c.do(cmd, http.MethodGet, "tail", q, nil)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			return eachLine(resp.Body, func(raw []byte, line echopubsub.AdminLine) error {
				if c.json {
					_, err := fmt.Fprintf(c.stdout, "%s\n", raw)
					return err
				}
				_, err := fmt.Fprintln(c.stdout, human(line))
				return err
			})
		})
	cmd.Flags().Uint64Var(&from, "from", 0, "first cursor of a durable stream to print before the live messages")
	cmd.Flags().Uint64Var(&count, "count", 0, "stop after this many messages (notices are not counted); 0: until interrupted")
	return cmd
}

// progressMin is the range from which replay shows a progress bar.
const progressMin = 1000

func (c *client) replayCommand() *cobra.Command {
	var from, to uint64
	cmd := c.command("replay STREAM", "Print a durable stream's stored rows from --from [to --to], with its gaps and truncation",
		cobra.ExactArgs(1), func(cmd *cobra.Command, args []string) error {
			q := url.Values{"stream": {args[0]}, "from": {strconv.FormatUint(from, 10)}}
			if cmd.Flags().Changed("to") {
				q.Set("to", strconv.FormatUint(to, 10))
			}
			resp, err := c.do(cmd, http.MethodGet, "replay", q, nil)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var bar *progress
			err = eachLine(resp.Body, func(raw []byte, line echopubsub.AdminLine) error {
				if line.Kind == "replay" {
					end := line.Last
					if line.To > 0 && (end == 0 || line.To < end) {
						end = line.To
					}
					if end >= line.From && end-line.From+1 >= progressMin && c.terminal() {
						bar = &progress{out: c.stderr, from: line.From, total: end - line.From + 1}
					}
					if !c.json {
						return nil
					}
				}
				if bar != nil && line.Cursor > 0 {
					bar.at(line.Cursor)
				}
				if c.json {
					_, err := fmt.Fprintf(c.stdout, "%s\n", raw)
					return err
				}
				_, err := fmt.Fprintln(c.stdout, human(line))
				return err
			})
			if bar != nil {
				bar.done()
			}
			return err
		})
	cmd.Flags().Uint64Var(&from, "from", 1, "first cursor")
	cmd.Flags().Uint64Var(&to, "to", 0, "last cursor (default: the stream's end)")
	_ = cmd.MarkFlagRequired("from")
	return cmd
}

// progress is replay's bar on stderr (a terminal), redrawn at most every
// 1% of the range.
type progress struct {
	out         io.Writer
	from, total uint64
	shown       uint64
}

func (p *progress) at(cursor uint64) {
	n := min(cursor-p.from+1, p.total)
	if n*100/p.total == p.shown*100/p.total && n != p.total {
		return
	}
	p.shown = n
	const width = 40
	fill := int(n * width / p.total)
	fmt.Fprintf(p.out, "\r[%s%s] %d/%d", strings.Repeat("#", fill), strings.Repeat(" ", width-fill), n, p.total)
}

func (p *progress) done() { fmt.Fprintln(p.out) }

func (c *client) publishCommand() *cobra.Command {
	var typ string
	cmd := c.command("publish TOPIC [MESSAGE]",
		"Publish MESSAGE (or each line of stdin) on TOPIC through the node (its admin endpoint must allow publishing)",
		cobra.RangeArgs(1, 2), func(cmd *cobra.Command, args []string) error {
			var msgs []string
			if len(args) == 2 {
				msgs = []string{args[1]}
			} else {
				sc := bufio.NewScanner(cmd.InOrStdin())
				sc.Buffer(make([]byte, 64<<10), 1<<20)
				for sc.Scan() {
					msgs = append(msgs, sc.Text())
				}
				if err := sc.Err(); err != nil {
					return err
				}
			}
			for i, m := range msgs {
				body := []byte(m)
				if typ == "" { // a string: the message is the text itself
					body, _ = json.Marshal(m)
				}
				q := url.Values{"topic": {args[0]}}
				if typ != "" {
					q.Set("type", typ)
				}
				resp, err := c.do(cmd, http.MethodPost, "publish", q, bytes.NewReader(body))
				if err != nil {
					return fmt.Errorf("message %d: %w", i+1, err)
				}
				_ = resp.Body.Close()
			}
			if c.json {
				return json.NewEncoder(c.stdout).Encode(map[string]any{"topic": args[0], "published": len(msgs)})
			}
			_, err := fmt.Fprintf(c.stdout, "published %d message(s) on %s\n", len(msgs), args[0])
			return err
		})
	cmd.Flags().StringVar(&typ, "type", "", "the message's protobuf type, MESSAGE then being its protojson; empty: MESSAGE is text (google.protobuf.StringValue)")
	return cmd
}
