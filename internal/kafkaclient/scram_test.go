package kafkaclient

import (
	"context"
	"strings"
	"testing"
)

// RFC 7677's SCRAM-SHA-256 example; SCRAM-SHA-512 against the stack's
// SASL_SSL listener is in prober, internal/watch and cmd/outbox-canary
// (secured_test.go).
func TestSCRAMAnswersRFC7677sExample(t *testing.T) {
	m, err := newSCRAM("SCRAM-SHA-256", "user", "pencil")
	if err != nil {
		t.Fatal(err)
	}
	m.nonce = func() (string, error) { return "rOprNGfwEbeRWgbNEkqO", nil }
	ctx := context.Background()
	sess, first, err := m.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(first), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"; got != want {
		t.Errorf("client-first = %q, want %q", got, want)
	}
	done, final, err := sess.Next(ctx, []byte("r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"))
	if err != nil || done {
		t.Fatalf("server-first: done %t, err %v", done, err)
	}
	if got, want := string(final), "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="; got != want {
		t.Errorf("client-final = %q, want %q", got, want)
	}
	done, _, err = sess.Next(ctx, []byte("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="))
	if err != nil || !done {
		t.Fatalf("server-final: done %t, err %v", done, err)
	}
}

func TestSCRAMRefusesAServerThatDoesNotFollowTheExchange(t *testing.T) {
	const serverFirst = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
	for _, tc := range []struct {
		name, first, final, want string
	}{
		{"A server that does not know the password cannot prove it.", serverFirst, "v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "did not prove"},
		{"A server's error is passed on.", serverFirst, "e=invalid-proof", `the server says "invalid-proof"`},
		{"A nonce that is not the client's, extended, is refused.", "r=someone-else,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "", "nonce"},
		{"A nonce the server did not extend is refused.", "r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "", "nonce"},
		{"A salt that is not base64 is refused.", "r=rOprNGfwEbeRWgbNEkqOx,s=***,i=4096", "", "salt"},
		{"An iteration count that is not a positive number is refused.", "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=0", "", "iteration"},
		{"A message that is not attributes is refused.", "garbage", "", "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := newSCRAM("SCRAM-SHA-256", "user", "pencil")
			if err != nil {
				t.Fatal(err)
			}
			m.nonce = func() (string, error) { return "rOprNGfwEbeRWgbNEkqO", nil }
			ctx := context.Background()
			sess, _, err := m.Start(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = sess.Next(ctx, []byte(tc.first))
			if err == nil && tc.final != "" {
				var done bool
				done, _, err = sess.Next(ctx, []byte(tc.final))
				if done {
					t.Fatal("the exchange succeeded")
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestSCRAMEscapesTheUserName(t *testing.T) {
	m, err := newSCRAM("SCRAM-SHA-512", "a=b,c", "x")
	if err != nil {
		t.Fatal(err)
	}
	_, first, err := m.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(first), "n,,n=a=3Db=2Cc,r=") {
		t.Errorf("client-first = %q, want the user name escaped as a=3Db=2Cc", first)
	}
}
