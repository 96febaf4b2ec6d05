package mock_test

import (
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/providers/providertest"
)

var faultKinds = map[error]string{providers.ErrQuotaExceeded: "quota", providers.ErrTransient: "transient", providers.ErrPermanent: "permanent"}

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Env {
		p, c := newMock(t, mock.Config{})
		return providertest.Env{
			Provider:  p,
			UnknownID: mock.ID("proxy-000000000000"),
			Settle:    func() { c.add(time.Second) },
			Fail: func(op string, kind error) bool {
				return p.Inject(mock.Fault{Op: op, Kind: faultKinds[kind]}) == nil
			},
			// The mock's every instance is one the operator made: there is no foreign one to
			// plant, and no server to hold.
		}
	})
}
