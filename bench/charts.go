package main

import (
	"fmt"
	"image/color"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// series is one system's bars in a grouped bar chart.
type series struct {
	name string
	vals []float64 // one per category; 0: not measured
}

var chartColors = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // durable
	color.RGBA{R: 0x9e, G: 0xc8, B: 0xe6, A: 0xff}, // durable variant
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // DBOS
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // River
	color.RGBA{R: 0x98, G: 0xdf, B: 0x8a, A: 0xff}, // River variant
	color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}, // floor
	color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff}, // durable option
}

// barChart writes a grouped bar chart to file (PNG).
func barChart(file, title, ylabel string, cats []string, ss []series, colors []color.Color) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	top := 0.0
	w := vg.Points(float64(min(28, 160/max(1, len(ss)))))
	for i, s := range ss {
		for _, v := range s.vals {
			top = max(top, v)
		}
		bc, err := plotter.NewBarChart(plotter.Values(s.vals), w)
		if err != nil {
			return err
		}
		bc.LineStyle.Width = vg.Length(0)
		bc.Color = colors[i%len(colors)]
		bc.Offset = w * vg.Length(float64(i)-float64(len(ss)-1)/2)
		p.Add(bc)
		p.Legend.Add(s.name, bc)
	}
	p.Y.Min = 0
	p.Y.Max = top * 1.35 // room for the legend
	p.NominalX(cats...)
	return p.Save(vg.Length(max(6.5, 1.6*float64(len(cats))+2))*vg.Inch, 4*vg.Inch, file)
}

// writeCharts writes latency.png, throughput.png and drain.png to dir from
// the medians of the run.
func (r *Result) writeCharts(dir string) error {
	if sc := r.Scale; sc != nil && len(sc.Rows) > 0 {
		cats := make([]string, len(sc.Rows))
		drain, tput, server, execs := make([]float64, len(sc.Rows)), make([]float64, len(sc.Rows)), make([]float64, len(sc.Rows)), make([]float64, len(sc.Rows))
		for i, row := range sc.Rows {
			cats[i] = fmt.Sprintf("%d process(es)", row.Processes)
			drain[i], tput[i] = row.PerS/1000, row.TputPerS/1000
			server[i], execs[i] = 100*row.ServerShare, 100*row.ExecShare
		}
		if err := barChart(filepath.Join(dir, "scale.png"), "Executor processes on one Postgres: runs per second",
			"thousand runs/s", cats, []series{{"drain of one queue", drain}, {"1-step workflows, 16 goroutines per process", tput}},
			[]color.Color{chartColors[0], chartColors[1]}); err != nil {
			return fmt.Errorf("scale chart: %w", err)
		}
		if err := barChart(filepath.Join(dir, "scale-cpu.png"), "Executor processes on one Postgres: share of the machine's CPU during the drain",
			"% of all cores", cats, []series{{"Postgres", server}, {"executor processes", execs}},
			[]color.Color{chartColors[5], chartColors[0]}); err != nil {
			return fmt.Errorf("scale chart: %w", err)
		}
	}
	if r.Soak != nil && len(r.Soak.Per) > 0 {
		if err := r.Soak.chart(dir); err != nil {
			return fmt.Errorf("soak chart: %w", err)
		}
	}
	m := r.Median
	// Latency per step count.
	lat := []series{{name: "durable", vals: []float64{m["wf0_us"] / 1000, m["wf1_us"] / 1000, m["wf10_us"] / 1000}}}
	cols := []color.Color{chartColors[0]}
	if _, ok := m["dbos_wf0_us"]; ok {
		lat = append(lat, series{"DBOS Go v1.8.0", []float64{m["dbos_wf0_us"] / 1000, m["dbos_wf1_us"] / 1000, m["dbos_wf10_us"] / 1000}})
		cols = append(cols, chartColors[2])
	}
	fa := m["floor_insert_us"] / 1000
	lat = append(lat, series{"raw INSERT x (1 + k), autocommit", []float64{fa, 2 * fa, 11 * fa}})
	cols = append(cols, chartColors[5])
	if err := barChart(filepath.Join(dir, "latency.png"),
		"Sequential workflow latency (Start + Result), mean, median of rounds", "ms per workflow",
		[]string{"0 steps", "1 step", "10 steps"}, lat, cols); err != nil {
		return fmt.Errorf("latency chart: %w", err)
	}

	// Throughput per concurrency.
	conc := r.Params.Concurrency
	cats := make([]string, len(conc))
	get := func(f string) []float64 {
		v := make([]float64, len(conc))
		for i, c := range conc {
			v[i] = m[fmt.Sprintf(f, c)]
		}
		return v
	}
	for i, c := range conc {
		cats[i] = fmt.Sprintf("%d goroutines", c)
	}
	tp := []series{{"durable (group commit)", get("tput_wf1_c%d_per_s")}}
	cols = []color.Color{chartColors[0]}
	if r.Params.GroupCommitCmp {
		tp = append(tp, series{"durable, group commit off", get("tput_nogc_c%d_per_s")})
		cols = append(cols, chartColors[1])
	}
	if r.Params.DBOS {
		tp = append(tp, series{"DBOS Go v1.8.0", get("tput_dbos_c%d_per_s")})
		cols = append(cols, chartColors[2])
	}
	tp = append(tp, series{"raw autocommit INSERT", get("tput_insert_c%d_per_s")})
	cols = append(cols, chartColors[5])
	if err := barChart(filepath.Join(dir, "throughput.png"),
		"Throughput of 1-step workflows by concurrency, median of rounds", "workflows (or INSERTs) per second",
		cats, tp, cols); err != nil {
		return fmt.Errorf("throughput chart: %w", err)
	}

	// Drain.
	if _, ok := m["drain_per_s"]; !ok {
		return nil
	}
	dr := []series{{"durable", []float64{m["drain_per_s"]}}}
	cols = []color.Color{chartColors[0]}
	for _, s := range []struct {
		key, name string
		col       color.Color
	}{
		{"drain_defer_per_s", "durable, DeferStepCheckpoints", chartColors[6]},
		{"drain0_per_s", "durable, 0-step workflows (reference)", chartColors[1]},
		{"dbos_drain_per_s", "DBOS Go v1.8.0", chartColors[2]},
		{"river_drain_per_s", "River v0.51.2, defaults", chartColors[3]},
		{"river_tuned_drain_per_s", "River, river bench tuning", chartColors[4]},
		{"drain_floor_insert_c32_per_s", "raw INSERT, 32 goroutines", chartColors[5]},
	} {
		if v, ok := m[s.key]; ok {
			dr = append(dr, series{s.name, []float64{v}})
			cols = append(cols, s.col)
		}
	}
	if err := barChart(filepath.Join(dir, "drain.png"),
		"Queue drain, pre-enqueued 1-step workflows / no-op jobs", "per second",
		[]string{"drain"}, dr, cols); err != nil {
		return fmt.Errorf("drain chart: %w", err)
	}
	return nil
}
