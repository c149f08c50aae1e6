package durablevet

import (
	"go/types"
	"strings"
)

// A rule is what the analyzer says about one kind of finding: its
// category, why it breaks replay and what to use instead.
type rule struct {
	category string
	why      string
	advice   string
}

// The rules. Each finding's message is "<what> <where> <why>: <advice>".
var (
	ruleNow = &rule{"time", "returns another time on replay",
		"use durable.Now(wctx)"}
	ruleElapsed = &rule{"time", "depends on the current time, which differs on replay",
		"subtract from durable.Now(wctx)"}
	ruleSleep = &rule{"time", "is not recorded, so a resumed run waits again from the start",
		"use durable.Sleep(wctx, d)"}
	ruleTimer = &rule{"time", "is not recorded, so a resumed run waits again from the start",
		"use durable.Sleep(wctx, d), or durable.Recv with a timeout"}
	ruleRandom = &rule{"random", "draws another value on replay",
		"use durable.NewID(wctx), or draw the value in a durable.Step"}
	ruleIO = &rule{"io", "does its I/O again on every replay and may get another answer",
		"do it in a durable.Step (a durable.TxStep for database writes)"}
	ruleEnv = &rule{"env", "may read another value on the executor that replays the run",
		"pass it in the workflow's input, or read it in a durable.Step"}
	ruleGoroutine = &rule{"goroutine", "runs code whose order and timing differ on replay",
		"start parallel steps with durable.Go(wctx, name, fn, opts) and wait with Future.Wait"}
	ruleSelect = &rule{"channel", "takes whichever case is ready first, which differs on replay",
		"receive messages with durable.Recv, and wait for parallel steps with durable.Go and Future.Wait"}
	ruleChannel = &rule{"channel", "synchronises with code outside the run's record, which differs on replay",
		"receive messages with durable.Recv, and wait for parallel steps with durable.Go and Future.Wait"}
	ruleMapOrder = &rule{"map-order", "calls durable operations in map order, which differs on replay",
		"range over the sorted keys (slices.Sorted(maps.Keys(m)))"}
	ruleWait = &rule{"wait", "waits outside the run's record, so a resumed run waits again and may see another outcome",
		"use h.Await(wctx), which records the outcome and parks the run during a long wait"}
	ruleGlobalWrite = &rule{"global", "happens again on every replay, and other runs see it",
		"keep state in the workflow's local variables, or record it with a durable.Step"}
	ruleGlobalRead = &rule{"global", "may see another value on replay (the package changes it at run time)",
		"pass the value in the workflow's input, or read it in a durable.Step"}
)

// funcs maps "path.Func" (a package-level function or variable) and
// "path.Type.Method" to its rule.
var funcs = map[string]*rule{}

// methodsOf maps "path.Type" to the rule of every method of the type.
var methodsOf = map[string]*rule{}

// wholePackages maps an import path to the rule of every function,
// method and variable of the package.
var wholePackages = map[string]*rule{
	"math/rand":    ruleRandom,
	"math/rand/v2": ruleRandom,
	"crypto/rand":  ruleRandom,
	"io/ioutil":    ruleIO,
	"net/rpc":      ruleIO,
	"net/smtp":     ruleIO,
}

func add(table map[string]*rule, r *rule, path, names string) {
	for _, n := range strings.Fields(names) {
		table[path+"."+n] = r
	}
}

func init() {
	add(funcs, ruleNow, "time", "Now")
	add(funcs, ruleElapsed, "time", "Since Until")
	add(funcs, ruleSleep, "time", "Sleep")
	add(funcs, ruleTimer, "time", "After AfterFunc NewTimer NewTicker Tick")
	add(funcs, ruleRandom, "github.com/google/uuid",
		"New NewString NewRandom NewRandomFromReader NewUUID NewV6 NewV7 NewV7FromReader")

	add(funcs, ruleGoroutine, "sync", "WaitGroup.Go")
	add(funcs, ruleGoroutine, "golang.org/x/sync/errgroup", "Group.Go Group.TryGo")

	add(funcs, ruleIO, "net", "Dial DialTimeout DialIP DialTCP DialUDP DialUnix Listen ListenIP ListenMulticastUDP "+
		"ListenPacket ListenTCP ListenUDP ListenUnix ListenUnixgram LookupAddr LookupCNAME LookupHost LookupIP "+
		"LookupMX LookupNS LookupPort LookupSRV LookupTXT ResolveIPAddr ResolveTCPAddr ResolveUDPAddr "+
		"Interfaces InterfaceAddrs InterfaceByIndex InterfaceByName")
	add(methodsOf, ruleIO, "net", "Conn PacketConn Listener TCPConn UDPConn UnixConn IPConn TCPListener "+
		"UnixListener Dialer Resolver ListenConfig conn")
	add(funcs, ruleIO, "net/http", "Get Head Post PostForm ListenAndServe ListenAndServeTLS Serve ServeTLS")
	add(methodsOf, ruleIO, "net/http", "Client Transport Server")
	add(funcs, ruleIO, "os", "Open OpenFile Create CreateTemp MkdirTemp ReadFile WriteFile ReadDir Remove RemoveAll "+
		"Rename Mkdir MkdirAll Stat Lstat Chmod Chown Lchown Chtimes Chdir Truncate Link Symlink Readlink Pipe "+
		"OpenRoot OpenInRoot CopyFS DirFS StartProcess FindProcess")
	add(methodsOf, ruleIO, "os", "File Root Process")
	add(funcs, ruleIO, "os/exec", "LookPath")
	add(methodsOf, ruleIO, "os/exec", "Cmd")
	add(funcs, ruleIO, "database/sql", "Open OpenDB")
	add(methodsOf, ruleIO, "database/sql", "DB Tx Conn Stmt Rows Row")
	add(funcs, ruleIO, "github.com/jackc/pgx/v5", "Connect ConnectConfig ConnectWithOptions BeginFunc BeginTxFunc "+
		"CollectRows CollectOneRow CollectExactlyOneRow AppendRows ForEachRow")
	add(methodsOf, ruleIO, "github.com/jackc/pgx/v5", "Conn Tx Rows Row BatchResults LargeObjects LargeObject")
	add(funcs, ruleIO, "github.com/jackc/pgx/v5/pgxpool", "New NewWithConfig")
	add(methodsOf, ruleIO, "github.com/jackc/pgx/v5/pgxpool", "Pool Conn Tx")
	add(funcs, ruleIO, "github.com/jackc/pgx/v5/pgconn", "Connect ConnectConfig ConnectWithOptions")
	add(methodsOf, ruleIO, "github.com/jackc/pgx/v5/pgconn", "PgConn ResultReader MultiResultReader")

	// Waiting for another run from workflow code: Handle.Await records the
	// outcome; Result and Status read the database on every replay.
	add(funcs, ruleWait, "github.com/durable-go/durable", "Handle.Result Handle.Status")
	add(methodsOf, ruleIO, "github.com/durable-go/durable", "Client")

	add(funcs, ruleEnv, "os", "Getenv LookupEnv Environ ExpandEnv Hostname Getwd Getpid Getppid Executable "+
		"UserHomeDir UserCacheDir UserConfigDir Args")
}

// ruleOf returns the rule of a use of obj (a function, method or
// package-level variable of another package), and the name to show.
func ruleOf(obj types.Object) (*rule, string) {
	pkg := obj.Pkg()
	if pkg == nil {
		return nil, ""
	}
	path := pkg.Path()
	switch obj := obj.(type) {
	case *types.Func:
		fn := obj.Origin()
		if recv := fn.Signature().Recv(); recv != nil {
			t, star := recvTypeName(recv.Type()), ""
			if _, ok := types.Unalias(recv.Type()).(*types.Pointer); ok {
				star = "*"
			}
			name := "(" + star + pkg.Name() + "." + t + ")." + fn.Name()
			if r := funcs[path+"."+t+"."+fn.Name()]; r != nil {
				return r, name
			}
			if r := methodsOf[path+"."+t]; r != nil {
				return r, name
			}
			return wholePackages[path], name
		}
		if r := funcs[path+"."+fn.Name()]; r != nil {
			return r, pkg.Name() + "." + fn.Name()
		}
		return wholePackages[path], pkg.Name() + "." + fn.Name()
	case *types.Var:
		if obj.IsField() || obj.Parent() != pkg.Scope() {
			return nil, ""
		}
		if r := funcs[path+"."+obj.Name()]; r != nil {
			return r, pkg.Name() + "." + obj.Name()
		}
		return wholePackages[path], pkg.Name() + "." + obj.Name()
	}
	return nil, ""
}

// recvTypeName is the name of a method's receiver type: T for T and *T.
func recvTypeName(t types.Type) string {
	if p, ok := types.Unalias(t).(*types.Pointer); ok {
		t = p.Elem()
	}
	if n, ok := types.Unalias(t).(*types.Named); ok {
		return n.Origin().Obj().Name()
	}
	return ""
}
