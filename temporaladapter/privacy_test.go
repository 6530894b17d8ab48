package temporaladapter_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
)

// aesCodec is the kind of PayloadCodec a user plugs into Dial: AES-GCM over
// each payload, marked by its own encoding so that decoding leaves foreign
// payloads alone (Temporal's encryption sample does the same).
type aesCodec struct{ aead cipher.AEAD }

const encryptedEncoding = "binary/encrypted"

func newAESCodec(t *testing.T) aesCodec {
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	block, err := aes.NewCipher(key)
	require.NoError(t, err)
	aead, err := cipher.NewGCM(block)
	require.NoError(t, err)
	return aesCodec{aead: aead}
}

func (c aesCodec) Encode(ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(ps))
	for i, p := range ps {
		plain, err := proto.Marshal(p)
		if err != nil {
			return nil, err
		}
		nonce := make([]byte, c.aead.NonceSize())
		if _, err := rand.Read(nonce); err != nil {
			return nil, err
		}
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{converter.MetadataEncoding: []byte(encryptedEncoding)},
			Data:     c.aead.Seal(nonce, nonce, plain, nil),
		}
	}
	return out, nil
}

func (c aesCodec) Decode(ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(ps))
	for i, p := range ps {
		if string(p.GetMetadata()[converter.MetadataEncoding]) != encryptedEncoding {
			out[i] = p
			continue
		}
		n := c.aead.NonceSize()
		if len(p.GetData()) < n {
			return nil, errors.New("encrypted payload shorter than its nonce")
		}
		plain, err := c.aead.Open(nil, p.GetData()[:n], p.GetData()[n:], nil)
		if err != nil {
			return nil, err
		}
		var dec commonpb.Payload
		if err := proto.Unmarshal(plain, &dec); err != nil {
			return nil, err
		}
		out[i] = &dec
	}
	return out, nil
}

type secretIn struct {
	Secret string `json:"secret"`
}

// TestPayloadCodecEncryptsWhatTemporalStores runs a kind through a client
// dialed with an encrypting codec. The step receives the plain input and
// its result reaches the handler (the round trip), while nothing Temporal
// stores — workflow and activity inputs, results, the memo, the failure of
// a step — holds the secret: the history read by a client without the codec
// is searched byte by byte.
func TestPayloadCodecEncryptsWhatTemporalStores(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	const secret = "s3cret-4c1d-payload"
	_, err := h.pool.Exec(ctx, `CREATE TABLE tp_privacy (seen text NOT NULL)`)
	require.NoError(t, err)

	codec := newAESCodec(t)
	c, err := temporaladapter.Dial(ctx, temporaladapter.ClientConfig{
		HostPort: server.HostPort, Namespace: server.Namespace, Logger: testLogger(),
		PayloadCodecs: []converter.PayloadCodec{codec},
	})
	require.NoError(t, err)
	t.Cleanup(c.Close)

	record := port.DeclareActivity[secretIn, secretIn]("privacy.record")
	refuse := port.DeclareActivity[secretIn, struct{}]("privacy.refuse")
	reg := port.NewRegistry()
	require.NoError(t, reg.RegisterActivity(
		port.Bind(record, func(ctx context.Context, in secretIn) (secretIn, error) {
			_, err := h.pool.Exec(ctx, `INSERT INTO tp_privacy (seen) VALUES ($1)`, in.Secret)
			return secretIn{Secret: in.Secret + "/echo"}, err
		}),
		port.Bind(refuse, func(context.Context, secretIn) (struct{}, error) {
			return struct{}{}, port.NonRetryable(errors.New("refused " + secret))
		}),
	))
	require.NoError(t, reg.Register(port.Definition{
		Kind: "privacy.kind", Version: 1, Retry: port.NetworkRetry(), ShowInput: true,
		Handler: port.Handle(func(f port.Flow, in secretIn) error {
			out, err := record.Run(f, "record", in)
			if err != nil {
				return err
			}
			if out.Secret != in.Secret+"/echo" {
				return port.NonRetryable(errors.New("the step's result did not round-trip"))
			}
			_, err = refuse.Run(f, "refuse", in)
			return err
		}),
	}))
	eng, err := temporaladapter.New(c, h.pool, reg, temporaladapter.Config{TaskQueue: h.queue, Logger: testLogger()})
	require.NoError(t, err)
	require.NoError(t, eng.Start(ctx, port.StartOptions{Concurrency: 4}))
	t.Cleanup(func() { _ = eng.Stop(context.Background()) })

	id, err := eng.Enqueue(ctx, "privacy.kind", secretIn{Secret: secret}, port.EnqueueOptions{IdempotencyKey: "privacy", BusinessKey: "plan-p"})
	require.NoError(t, err)
	run := h.waitStatus(id, port.StatusFailed)
	require.Contains(t, run.LastError, "refused "+secret, "the projection, in our own Postgres, keeps the decoded error")
	var seen string
	require.NoError(t, h.pool.QueryRow(ctx, `SELECT seen FROM tp_privacy`).Scan(&seen))
	require.Equal(t, secret, seen, "the step received the decoded input")

	// The harness's client has no codec: it reads what the server stores.
	iter := temporalClient.GetWorkflowHistory(ctx, temporaladapter.WorkflowID(id), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var events, encrypted int
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		events++
		raw, err := proto.Marshal(ev)
		require.NoError(t, err)
		require.False(t, bytes.Contains(raw, []byte(secret)), "event %d (%s) holds the secret in plain text", ev.GetEventId(), ev.GetEventType())
		if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil {
			for _, p := range a.GetInput().GetPayloads() {
				require.Equal(t, encryptedEncoding, string(p.GetMetadata()[converter.MetadataEncoding]))
				encrypted++
			}
			memo := a.GetMemo().GetFields()["taskport"]
			require.Equal(t, encryptedEncoding, string(memo.GetMetadata()[converter.MetadataEncoding]), "the memo goes through the codec too")
		}
	}
	require.Positive(t, events)
	require.Equal(t, 1, encrypted, "the workflow input was stored encrypted")

	// With the codec, the memo reads back, input included (the kind opts in
	// with ShowInput).
	desc, err := c.DescribeWorkflow(ctx, temporaladapter.WorkflowID(id), "")
	require.NoError(t, err)
	var m struct {
		Input string `json:"input"`
	}
	dc := converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), codec)
	require.NoError(t, dc.FromPayload(desc.Memo.GetFields()["taskport"], &m))
	require.JSONEq(t, `{"secret": "`+secret+`"}`, m.Input)
}
