package qdrantcheck

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	_ "github.com/qdrant/go-client/qdrant" // registers the qdrant.* messages and services
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/projector/projector/internal/testenv"
)

// answer is one recorded exchange: a request and what the server said.
type answer struct {
	Case     string          `json:"case"`
	Method   string          `json:"method"`
	Request  json.RawMessage `json:"request"`
	Code     string          `json:"code"`
	Message  string          `json:"message"`
	Response json.RawMessage `json:"response"`
	// RestsOn says, for a case of the project's own, what its expected
	// answer rests on until a real server has checked it.
	RestsOn string `json:"rests_on"`
}

func readAnswers(t *testing.T, path string) []answer {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []answer
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var a answer
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, a)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRecordedAnswers sends the recorded requests in their order and
// requires the recorded answers.
func TestRecordedAnswers(t *testing.T) {
	answers := readAnswers(t, "testdata/answers.jsonl")
	if len(answers) != 26 {
		t.Fatalf("testdata/answers.jsonl has %d answers, want 26", len(answers))
	}
	conn := dial(t, freshServer(t, "acc_record", "acc_record_alias", "acc_record_alias2"))
	for i, a := range answers {
		got := call(t, conn, a.Method, a.Request)
		if diff := got.differs(a); diff != "" {
			t.Errorf("answer %d (%s, %s): %s", i+1, a.Case, a.Method, diff)
		}
	}
}

// TestOwnCases sends the project's own cases (testdata/cases.jsonl): calls
// the projector and its tests make that the recording lacks, each with the
// answer the server's documentation or source gives.
func TestOwnCases(t *testing.T) {
	cases := readAnswers(t, "testdata/cases.jsonl")
	conn := dial(t, freshServer(t, "own_case", "own_strict", "own_zero", "own_alias", "own_other"))
	for i, a := range cases {
		if a.RestsOn == "" {
			t.Fatalf("case %d (%s) does not say what it rests on", i+1, a.Case)
		}
		got := call(t, conn, a.Method, a.Request)
		if diff := got.differs(a); diff != "" {
			t.Errorf("case %d (%s, %s): %s\n\trests on %s", i+1, a.Case, a.Method, diff, a.RestsOn)
		}
	}
}

// result is what a server answered to one call.
type result struct {
	code     codes.Code
	message  string
	response []byte // protojson, nil on an error
}

// differs says how r differs from the recorded answer a, or "" when it
// does not.
func (r result) differs(a answer) string {
	if r.code.String() != a.Code || r.message != a.Message {
		return fmt.Sprintf("got %s %q, want %s %q", r.code, r.message, a.Code, a.Message)
	}
	if r.code != codes.OK {
		return ""
	}
	got, want := normalize(r.response), normalize(a.Response)
	if !same(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		return fmt.Sprintf("got response %s, want %s", g, w)
	}
	return ""
}

// call sends a request, given as protojson, to a method of the qdrant
// services and returns the answer.
func call(t *testing.T, conn *grpc.ClientConn, method string, request json.RawMessage) result {
	t.Helper()
	in, out := messages(t, method)
	if err := protojson.Unmarshal(request, in); err != nil {
		t.Fatalf("%s request: %v", method, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := conn.Invoke(ctx, method, in, out); err != nil {
		st := status.Convert(err)
		return result{code: st.Code(), message: st.Message()}
	}
	b, err := protojson.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return result{code: codes.OK, response: b}
}

// messages returns new request and response messages of a method named as
// gRPC names it on the wire ("/qdrant.Points/Upsert").
func messages(t *testing.T, method string) (proto.Message, proto.Message) {
	t.Helper()
	name := protoreflect.FullName(strings.ReplaceAll(strings.TrimPrefix(method, "/"), "/", "."))
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		t.Fatalf("method %s: %v", method, err)
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		t.Fatalf("%s is not a method", method)
	}
	newMsg := func(full protoreflect.FullName) proto.Message {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(full)
		if err != nil {
			t.Fatalf("message %s: %v", full, err)
		}
		return mt.New().Interface()
	}
	return newMsg(md.Input().FullName()), newMsg(md.Output().FullName())
}

// varying are the response fields that change from run to run, removed
// from the recording wherever they appear.
var varying = map[string]bool{"time": true, "operationId": true, "usage": true}

// normalize decodes a protojson response and drops the varying fields; an
// absent response is the empty message.
func normalize(b []byte) any {
	if len(b) == 0 || string(b) == "null" {
		return map[string]any{}
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return string(b)
	}
	return strip(v)
}

func strip(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if !varying[k] {
				out[k] = strip(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = strip(e)
		}
		return out
	}
	return v
}

// same compares decoded JSON; numbers are equal when they are as float32,
// the precision of a score.
func same(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && float32(x) == float32(y) || ok && math.Abs(x-y) <= 1e-6*math.Max(1, math.Abs(y))
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, e := range x {
			if !same(e, y[k]) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !same(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

// freshServer returns the gRPC address of a server on which collections
// and aliases of the given names do not exist: a private one of
// PROJECTOR_TEST_QDRANT_BIN, or the shared one with them deleted.
func freshServer(t *testing.T, names ...string) string {
	t.Helper()
	if os.Getenv("PROJECTOR_TEST_QDRANT_BIN") != "" {
		return testenv.StartQdrant(t).Addr()
	}
	addr := testenv.QdrantAddr(t)
	conn := dial(t, addr)
	for _, n := range names {
		call(t, conn, "/qdrant.Collections/UpdateAliases", json.RawMessage(fmt.Sprintf(`{"actions":[{"deleteAlias":{"aliasName":%q}}]}`, n)))
		call(t, conn, "/qdrant.Collections/Delete", json.RawMessage(fmt.Sprintf(`{"collectionName":%q}`, n)))
	}
	return addr
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
