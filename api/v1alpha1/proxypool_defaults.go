package v1alpha1

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// Default fills what the CRD schema would have defaulted, template included.
func (s *ProxyPoolSpec) Default() {
	if s.Replicas == nil {
		v := DefaultPoolReplicas
		s.Replicas = &v
	}
	if s.Strategy == nil {
		s.Strategy = &PoolStrategy{}
	}
	if s.Strategy.MaxSurge == nil {
		v := intstr.FromInt32(DefaultPoolMaxSurge)
		s.Strategy.MaxSurge = &v
	}
	if s.Strategy.MaxUnavailable == nil {
		v := intstr.FromInt32(DefaultPoolMaxUnavailable)
		s.Strategy.MaxUnavailable = &v
	}
	if s.DrainSeconds == nil {
		v := DefaultPoolDrainSeconds
		s.DrainSeconds = &v
	}
	if a := s.Autoscale; a != nil {
		if a.MinReplicas == nil {
			v := int32(1)
			a.MinReplicas = &v
		}
		if a.TargetLeaseUtilization == nil {
			v := DefaultTargetLeaseUtilization
			a.TargetLeaseUtilization = &v
		}
		if a.ScaleDownStabilizationSeconds == nil {
			v := DefaultScaleDownStabilization
			a.ScaleDownStabilizationSeconds = &v
		}
	}
	s.Template.Spec.Default()
}

// Validate repeats the CRD's rules for bodies that did not pass through the API server.
// Call it after Default.
func (s *ProxyPoolSpec) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("spec.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if s.Replicas != nil && (*s.Replicas < 0 || *s.Replicas > MaxPoolReplicas) {
		bad("replicas", "%d is out of range 0-%d", *s.Replicas, MaxPoolReplicas)
	}
	if s.Template.Spec.Mode != ModeManaged {
		bad("template.spec.mode", "pool members must be Managed")
	}
	if err := s.Template.Spec.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("template: %w", err))
	}
	if st := s.Strategy; st != nil {
		surge, err1 := scaledValue(st.MaxSurge, 100, true)
		unav, err2 := scaledValue(st.MaxUnavailable, 100, false)
		if err1 != nil {
			bad("strategy.maxSurge", "%s", err1.Error())
		}
		if err2 != nil {
			bad("strategy.maxUnavailable", "%s", err2.Error())
		}
		if err1 == nil && err2 == nil && surge == 0 && unav == 0 {
			bad("strategy", "maxSurge and maxUnavailable must not both be 0")
		}
	}
	if r := s.Rotation; r != nil {
		if r.MaxAge != nil && r.MaxAge.Duration < time.Minute {
			bad("rotation.maxAge", "%s is shorter than 1m", r.MaxAge.Duration)
		}
		if r.BanThreshold != nil && *r.BanThreshold < 1 {
			bad("rotation.banThreshold", "%d must be at least 1", *r.BanThreshold)
		}
		if r.MinBand != "" && r.MinBand != BandGood && r.MinBand != BandFair {
			bad("rotation.minBand", "%q is not Good or Fair", r.MinBand)
		}
	}
	if s.DrainSeconds != nil && (*s.DrainSeconds < 0 || *s.DrainSeconds > 86400) {
		bad("drainSeconds", "%d is out of range 0-86400", *s.DrainSeconds)
	}
	if a := s.Autoscale; a != nil {
		if a.MaxReplicas < 1 || a.MaxReplicas > MaxPoolReplicas {
			bad("autoscale.maxReplicas", "%d is out of range 1-%d", a.MaxReplicas, MaxPoolReplicas)
		}
		if a.MinReplicas != nil && (*a.MinReplicas < 0 || *a.MinReplicas > a.MaxReplicas) {
			bad("autoscale.minReplicas", "%d must be 0-maxReplicas (%d)", *a.MinReplicas, a.MaxReplicas)
		}
		if u := a.TargetLeaseUtilization; u != nil && (*u < 1 || *u > 100) {
			bad("autoscale.targetLeaseUtilization", "%d is out of range 1-100", *u)
		}
		if w := a.ScaleDownStabilizationSeconds; w != nil && (*w < 0 || *w > 86400) {
			bad("autoscale.scaleDownStabilizationSeconds", "%d is out of range 0-86400", *w)
		}
	}
	return errors.Join(errs...)
}

// SurgeAndUnavailable resolves maxSurge (percentages rounded up) and maxUnavailable (rounded
// down) against replicas, the way a Deployment does. Both 0 is refused by validation; should
// it arrive anyway, surge becomes 1 so a rollout can still make progress.
func (s *ProxyPoolSpec) SurgeAndUnavailable(replicas int32) (surge, unavailable int32) {
	if s.Strategy != nil {
		surge, _ = scaledValue(s.Strategy.MaxSurge, replicas, true)
		unavailable, _ = scaledValue(s.Strategy.MaxUnavailable, replicas, false)
	}
	if surge == 0 && unavailable == 0 {
		surge = 1
	}
	return surge, unavailable
}

// scaledValue resolves an int-or-percent against total.
func scaledValue(v *intstr.IntOrString, total int32, roundUp bool) (int32, error) {
	if v == nil {
		return 0, nil
	}
	if v.Type == intstr.Int {
		if v.IntVal < 0 || v.IntVal > MaxPoolReplicas {
			return 0, fmt.Errorf("%d is out of range 0-%d", v.IntVal, MaxPoolReplicas)
		}
		return v.IntVal, nil
	}
	p, ok := strings.CutSuffix(v.StrVal, "%")
	n, err := strconv.Atoi(p)
	if !ok || err != nil || n < 0 || n > 999 {
		return 0, fmt.Errorf("%q is not an integer or a percentage like 25%%", v.StrVal)
	}
	f := float64(n) * float64(total) / 100
	if roundUp {
		return int32(math.Ceil(f)), nil
	}
	return int32(math.Floor(f)), nil
}
