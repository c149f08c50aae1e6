module example.com/wf

go 1.26.8
