package dashboard

import (
	"fmt"
	"net/http"
	"time"

	"github.com/durable-go/durable"
)

// The activity page charts what every executor sharing the database did
// recently, read from the database (durable.ReadActivity) on each view:
// the dashboard often runs in a process of its own (durable ui), where
// the engine's in-process meters would have seen nothing.

// activityWindow is the span of the runs-finished chart.
const activityWindow = time.Hour

// Chart geometry, in SVG user units.
const (
	actWidth  = 960.0
	actLeft   = 48.0  // the count axis
	actLabel  = 200.0 // the labels of a row chart
	actHeight = 160.0 // the bars of the per-minute chart
	actRow    = 22.0
)

// finishedStatuses are the stacked statuses of the per-minute chart,
// bottom up.
var finishedStatuses = []durable.Status{durable.StatusSuccess, durable.StatusError, durable.StatusCancelled, durable.StatusDead}

type activityView struct {
	durable.Activity
	Minutes     []minuteBar
	MaxPerMin   int64
	Totals      []statusTotal
	FirstMinute string
	LastMinute  string
	QueueRows   []queueBar
	QueueHeight float64
	Latency     []latencyBar
}

// minuteBar is one minute of the per-minute chart: a stack of segments.
type minuteBar struct {
	Minute   string // HH:MM UTC
	X, W     float64
	Segments []segment
	Total    int64
}

// segment is one rectangle of a stacked bar.
type segment struct {
	Status     string
	X, Y, W, H float64
	Count      int64
}

type statusTotal struct {
	Status string
	Count  int64
}

// queueBar is one queue's row of the depth chart.
type queueBar struct {
	Name     string
	Y        float64
	Segments []segment
	Ready    int
	Delayed  int
	Running  int
}

// latencyBar is one percentile's row of the latency chart.
type latencyBar struct {
	Label string
	Y, W  float64
	Value time.Duration
}

func (d *dash) activityPage(w http.ResponseWriter, r *http.Request) {
	a, err := durable.ReadActivity(r.Context(), d.eng, activityWindow)
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "activity", activityChart(a, time.Now()))
}

// activityChart lays out the charts of a: the geometry is computed here,
// the template only draws it.
func activityChart(a durable.Activity, now time.Time) activityView {
	v := activityView{Activity: a}
	perMinute := map[int64]map[durable.Status]int64{}
	totals := map[durable.Status]int64{}
	for _, f := range a.Finished {
		k := f.Minute.Unix()
		if perMinute[k] == nil {
			perMinute[k] = map[durable.Status]int64{}
		}
		perMinute[k][f.Status] += f.Count
		totals[f.Status] += f.Count
	}
	n := max(int(now.Sub(a.Since)/time.Minute)+1, 1)
	var minutes []time.Time
	for i := range n {
		minutes = append(minutes, a.Since.Add(time.Duration(i)*time.Minute))
	}
	for _, m := range minutes {
		var t int64
		for _, c := range perMinute[m.Unix()] {
			t += c
		}
		v.MaxPerMin = max(v.MaxPerMin, t)
	}
	step := (actWidth - actLeft) / float64(n)
	for i, m := range minutes {
		bar := minuteBar{Minute: m.UTC().Format("15:04"), X: actLeft + float64(i)*step, W: max(step-2, 1)}
		y := actHeight
		for _, s := range finishedStatuses {
			c := perMinute[m.Unix()][s]
			if c == 0 || v.MaxPerMin == 0 {
				continue
			}
			h := actHeight * float64(c) / float64(v.MaxPerMin)
			y -= h
			bar.Segments = append(bar.Segments, segment{Status: string(s), X: bar.X, Y: y, W: bar.W, H: h, Count: c})
			bar.Total += c
		}
		v.Minutes = append(v.Minutes, bar)
	}
	if len(minutes) > 0 {
		v.FirstMinute, v.LastMinute = minutes[0].UTC().Format("15:04"), minutes[len(minutes)-1].UTC().Format("15:04")
	}
	for _, s := range finishedStatuses {
		v.Totals = append(v.Totals, statusTotal{Status: string(s), Count: totals[s]})
	}

	most := 0
	for _, q := range a.Queues {
		most = max(most, q.Ready+q.Delayed+q.Running)
	}
	bars := actWidth - actLabel - 8
	for i, q := range a.Queues {
		row := queueBar{Name: q.Name, Y: float64(i) * actRow, Ready: q.Ready, Delayed: q.Delayed, Running: q.Running}
		x := actLabel
		for _, part := range []struct {
			class string
			n     int
		}{{"pending", q.Running}, {"enqueued", q.Ready}, {"cancelled", q.Delayed}} {
			if part.n == 0 {
				continue
			}
			wd := bars * float64(part.n) / float64(most)
			row.Segments = append(row.Segments, segment{Status: part.class, X: x, Y: 3, W: wd, H: 16, Count: int64(part.n)})
			x += wd
		}
		v.QueueRows = append(v.QueueRows, row)
	}
	v.QueueHeight = float64(len(a.Queues))*actRow + 4

	for i, p := range []struct {
		label string
		d     time.Duration
	}{{"p50", a.Steps.P50}, {"p99", a.Steps.P99}} {
		wd := 0.0
		if a.Steps.P99 > 0 {
			wd = max(bars*float64(p.d)/float64(a.Steps.P99), 2)
		}
		v.Latency = append(v.Latency, latencyBar{Label: p.label, Y: float64(i) * actRow, W: wd, Value: p.d})
	}
	return v
}

// count renders a number of runs for a chart's title.
func count(n int64, what string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}
