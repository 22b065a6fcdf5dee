"""What each kind of finding means and what to check, in English and Brazilian Portuguese.

The findings panel shows these next to a finding's one-line message. Pure data: no Textual.
"""

from __future__ import annotations

from commviz.text.explain import LANGS


def _t(en: str, pt: str) -> dict[str, str]:
    """One text in both languages; whitespace collapsed so the source can wrap freely."""
    return {"en": " ".join(en.split()), "pt": " ".join(pt.split())}


ADVICE: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    # type: (what it means, what to check)
    "straggler": (
        _t("""One rank keeps arriving last at the collectives of its group, and every other
        rank waits inside the collective until it comes: the whole job runs at the speed of
        its slowest rank.""",
           """Um rank chega sempre por último aos coletivos do seu grupo, e todos os outros
        esperam dentro do coletivo até ele chegar: o job inteiro anda na velocidade do rank
        mais lento."""),
        _t("""What that rank does between collectives: more data or a bigger batch than the
        others, data loading or I/O, logging or checkpointing on that rank only, a slower or
        busier device or CPU (other processes, thermal throttling).""",
           """O que esse rank faz entre os coletivos: mais dados ou um batch maior que os
        outros, carregamento de dados ou I/O, log ou checkpoint só nesse rank, um dispositivo
        ou CPU mais lento ou mais ocupado (outros processos, throttling térmico)."""),
    ),
    "hang": (
        _t("""Some ranks are inside an operation that others never joined (or a send waits
        for a receive that was never posted, or ranks wait on each other in a cycle). They
        will wait until the process group's timeout, then fail.""",
           """Alguns ranks estão dentro de uma operação da qual outros nunca participaram (ou
        um send espera um recv que nunca foi postado, ou ranks esperam uns pelos outros em
        ciclo). Eles vão esperar até o timeout do process group e então falhar."""),
        _t("""The code path of the missing ranks: a collective inside an `if` that depends on
        the rank or on the data, an early `continue`/`return`, a different number of iterations
        or batches per rank, sends and receives not posted in matching order.""",
           """O caminho do código nos ranks que faltam: um coletivo dentro de um `if` que
        depende do rank ou dos dados, um `continue`/`return` antecipado, um número diferente
        de iterações ou batches por rank, sends e recvs postados em ordens que não casam."""),
    ),
    "failed": (
        _t("""An operation failed on some ranks (the backend raised an error) while other
        ranks sent no record of it: either they never entered it (one of them crashed or
        exited first and its peers saw the connection close, or they were elsewhere for
        longer than the process group's timeout), or they died inside it before their record
        could leave. Nobody waits in it any more.""",
           """Uma operação falhou em alguns ranks (o backend levantou um erro) enquanto outros
        ranks não enviaram nenhum registro dela: ou nunca entraram nela (um deles caiu ou
        saiu antes e os outros viram a conexão fechar, ou estavam em outro lugar por mais
        tempo que o timeout do process group), ou morreram dentro dela antes que o registro
        saísse. Ninguém espera mais nela."""),
        _t("""The log of the ranks with no record of it (exception, exit code, kill; there
        gloo's "Received data size doesn't match" or NCCL's "Message truncated" mean tensors
        of different sizes), then the failed ranks' error: "connection closed by peer" points
        at a peer that died, a timeout at one that went elsewhere (a collective inside an
        `if`, another number of iterations).""",
           """O log dos ranks sem registro dela (exceção, código de saída, kill; ali
        "Received data size doesn't match" do gloo ou "Message truncated" do NCCL indicam
        tamanhos diferentes), depois o erro dos que falharam: "connection closed by peer"
        aponta um par que morreu; um timeout, um que foi por outro caminho (coletivo dentro
        de um `if`, outro número de iterações)."""),
    ),
    "timeout": (  # a failed op found hung (or deadlocked) first: Finding.topic
        _t("""Ranks waited in an operation that could not complete (found as a hang or a
        deadlock before it failed) until the process group's timeout made the backend raise:
        the failure is the end of the hang, not a new fault, and its cause is the hang's.""",
           """Ranks esperaram numa operação que não podia terminar (apontada antes como
        travamento ou deadlock) até o timeout do process group fazer o backend levantar um
        erro: a falha é o fim do travamento, não um defeito novo, e a causa é a do
        travamento."""),
        _t("""What the hang named: why the missing ranks were elsewhere (a collective inside an
        `if` that depends on the rank or on the data, an early `continue`/`return`, a different
        number of iterations per rank); in a deadlock, the order in which each rank posts its sends,
        receives and collectives. The timeout errors in the ranks' logs only say how long they
        waited.""",
           """O que o travamento apontou: por que os ranks que faltavam estavam em outro lugar
        (um coletivo dentro de um `if` que depende do rank ou dos dados, um
        `continue`/`return` antecipado, um número diferente de iterações por rank); num deadlock,
        a ordem em que cada rank posta seus sends, recvs e coletivos. Os erros de timeout nos
        logs dos ranks só dizem quanto tempo eles esperaram."""),
    ),
    "lost_rank": (
        _t("""A rank stopped reporting without saying goodbye: its process died (crash, out of
        memory, killed) or its network broke. Its peers are stuck in whatever they share
        with it, until the timeout.""",
           """Um rank parou de se reportar sem se despedir: o processo morreu (crash, falta de
        memória, foi morto) ou a rede dele caiu. Os outros ficam presos no que compartilham
        com ele, até o timeout."""),
        _t("""That rank's log and exit code, the kernel log (`dmesg`: OOM killer), memory use
        before it died, the network between its host and the others.""",
           """O log e o código de saída desse rank, o log do kernel (`dmesg`: OOM killer), o
        uso de memória antes de ele morrer, a rede entre o host dele e os outros."""),
    ),
    "mismatch": (
        _t("""Ranks entered the same collective (same group, same sequence number) with a
        different operation, size or dtype. The backend then hangs, fails or, worse, returns
        wrong data.""",
           """Ranks entraram no mesmo coletivo (mesmo grupo, mesmo número de sequência) com
        operação, tamanho ou dtype diferentes. O backend então trava, falha ou, pior,
        devolve dados errados."""),
        _t("""The code of the rank that differs: a branch that calls another collective,
        tensors shaped from per-rank data (the last, smaller batch), a different dtype
        (mixed precision on one rank only).""",
           """O código do rank que difere: um desvio que chama outro coletivo, tensores com
        forma vinda de dados do próprio rank (o último batch, menor), um dtype diferente
        (precisão mista só em um rank)."""),
    ),
    "slow": (
        _t("""One pair of ranks takes far longer than the other pairs to move the same amount
        of data with the same operation, not counting the time spent waiting for each other.""",
           """Um par de ranks leva muito mais tempo que os outros pares para mover a mesma
        quantidade de dados com a mesma operação, sem contar o tempo de espera entre eles."""),
        _t("""The link between those ranks (which transport, NIC or PCIe path; NCCL_DEBUG=INFO
        shows it), a busy or throttled device on either side, other traffic on that link.""",
           """O enlace entre esses ranks (qual transporte, placa de rede ou caminho PCIe; o
        NCCL_DEBUG=INFO mostra), um dispositivo ocupado ou limitado em um dos lados, outro
        tráfego nesse enlace."""),
    ),
    "resolved": (
        _t("""A condition found earlier has ended: the missing rank arrived, the lost rank
        came back, the straggler caught up.""",
           """Uma condição encontrada antes terminou: o rank que faltava chegou, o rank
        perdido voltou, o atrasado alcançou os outros."""),
        _t("""Whether it comes back: a hang that resolves after a long time is still time the
        whole job lost.""",
           """Se ela volta a acontecer: um travamento que se resolve depois de muito tempo
        ainda é tempo que o job inteiro perdeu."""),
    ),
}

TITLES: dict[str, dict[str, str]] = {
    "straggler": {"en": "Straggler", "pt": "Rank atrasado"},
    "hang": {"en": "Hang", "pt": "Travamento"},
    "failed": {"en": "Failed operation", "pt": "Operação que falhou"},
    "timeout": {"en": "Hang ended by a timeout", "pt": "Travamento encerrado por timeout"},
    "lost_rank": {"en": "Lost rank", "pt": "Rank perdido"},
    "mismatch": {"en": "Mismatch", "pt": "Divergência"},
    "slow": {"en": "Slow link", "pt": "Enlace lento"},
    "resolved": {"en": "Resolved", "pt": "Resolvido"},
}


def advice(kind: str, lang: str = "en") -> tuple[str, str, str]:
    """(title, what it means, what to check) for a finding type or topic (``Finding.topic``),
    in ``lang``."""
    if lang not in LANGS:
        raise ValueError(f"unknown language {lang!r}; available: {', '.join(LANGS)}")
    meaning, check = ADVICE[kind]
    return TITLES[kind][lang], meaning[lang], check[lang]
