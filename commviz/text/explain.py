"""What each torch.distributed operation does, in English and Brazilian Portuguese.

The teaching screen shows, next to the animation, what the selected op means, how the
backend that ran it really moves the data (true to ``knowledge/collectives.md``: gloo's
ring toward rank - 1, its binomial-tree broadcast, NCCL's rings and chains), when to use
it and practical tips. Pure data and lookups: no Textual, no torch, cheap to import.

Variants (deprecated names, single-tensor forms) share their family's text and override
what differs, at least the title, which always names the actual function.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

LANGS: tuple[str, ...] = ("en", "pt")
BACKENDS: tuple[str, ...] = ("gloo", "nccl")


@dataclass(frozen=True)
class Explanation:
    op: str
    title: str
    what: str
    how: dict[str, str]
    when: str
    tips: tuple[str, ...]
    nccl_tips: frozenset[str] = frozenset()  # those of ``tips`` that only NCCL users can act on


def _t(en: str, pt: str) -> dict[str, str]:
    """One text in both languages; whitespace collapsed so the source can wrap freely."""
    return {"en": " ".join(en.split()), "pt": " ".join(pt.split())}


# --- Tips shared by several ops ------------------------------------------------------------

_TIP_FIRST_P2P = _t(
    """On NCCL the first transfer between two ranks is slower than the ones after it: NCCL
    sets up the connection to a new peer lazily, so the first send/recv blocks until the peer
    posts its matching call, and the very first recv holds the host until the data has
    arrived. Later calls only wait until the work is queued (gloo connects every pair when
    the group is created). Warm up before you time anything.""",
    """No NCCL a primeira transferência entre dois ranks é mais lenta que as seguintes: o
    NCCL só cria a conexão com um peer novo sob demanda (lazy), então o primeiro send/recv fica
    parado até o outro lado postar a chamada correspondente, e o primeiríssimo recv chega a
    segurar o host até os dados chegarem. Depois disso, as chamadas só esperam o trabalho
    entrar na fila (o gloo conecta todos os pares ao criar o grupo). Faça um aquecimento
    antes de cronometrar qualquer coisa.""",
)
_TIP_WAIT_SYNC = _t(
    """On NCCL, request.wait() does not stop the CPU: it makes the current CUDA stream wait
    for that one transfer. torch.cuda.synchronize() holds the CPU thread until everything
    queued on the GPU has finished: use it to take timings, not on every iteration, or it
    becomes a bottleneck.""",
    """No NCCL, request.wait() não trava a CPU: ele faz a stream CUDA atual esperar por
    aquela transferência. Já torch.cuda.synchronize() prende a thread da CPU até a GPU
    terminar tudo o que estava na fila: use para medir tempo, não a cada iteração, senão vira
    gargalo.""",
)
_TIP_OVERLAP = _t(
    """Post isend/irecv early, run computation that does not depend on the data, and call
    wait() only when you need the result: the transfer then hides behind the math instead of
    adding to the iteration's time.""",
    """Dispare o isend/irecv cedo, faça as contas que não dependem desses dados e só chame
    wait() quando for usar o resultado: assim a transferência fica escondida atrás do cálculo
    em vez de somar ao tempo da iteração.""",
)
_TIP_DONT_TOUCH = _t(
    """Until wait() returns, leave the tensor alone: writing to an isend buffer or reading an
    irecv buffer early gives wrong data without any error.""",
    """Até o wait() retornar, não mexa no tensor: escrever no buffer de um isend ou ler o de
    um irecv antes da hora dá dados errados sem nenhum erro.""",
)
_TIP_NCCL_DEBUG = _t(
    """Run with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,GRAPH,COLL,TUNING for detail) to
    see the rings NCCL built, the transport of each link (P2P/IPC, SHM, NET/IB, NET/Socket)
    and, on rank 0, the algorithm and protocol chosen for each call.""",
    """Rode com NCCL_DEBUG=INFO (e NCCL_DEBUG_SUBSYS=INIT,GRAPH,COLL,TUNING para mais
    detalhe) para ver os anéis que o NCCL montou, o transporte de cada ligação (P2P/IPC, SHM,
    NET/IB, NET/Socket) e, no rank 0, o algoritmo e o protocolo escolhidos a cada chamada.""",
)
_NCCL_TIPS = (_TIP_WAIT_SYNC, _TIP_NCCL_DEBUG)  # not shown beside another backend's demo
_TIP_NETWORK = _t(
    """At scale the network, not the GPU, sets the pace: a few microseconds lost on each
    exchange add up over thousands of iterations and ranks. InfiniBand, or a carefully tuned RoCE
    fabric, with RDMA and GPUDirect lets GPUs exchange data without a detour through the
    CPU.""",
    """Em grande escala quem dita o ritmo é a rede, não a GPU: poucos microssegundos perdidos
    em cada troca se acumulam ao longo de milhares de iterações e de ranks. InfiniBand, ou uma
    rede RoCE bem ajustada, com RDMA e GPUDirect, deixa as GPUs trocarem dados sem desviar
    pela CPU.""",
)
_TIP_DDP = _t(
    """DistributedDataParallel averages gradients with all_reduce, bucket by bucket, from
    C++ while backward runs, so the later buckets overlap the rest of backward. No Python
    call is made for them unless a comm hook is registered: commviz registers one that does
    the same arithmetic, which is how these buckets show up here (marked "by DDP").""",
    """O DistributedDataParallel tira a média dos gradientes com all_reduce, bucket por
    bucket, direto do C++ enquanto o backward roda, e assim os últimos buckets se sobrepõem
    ao resto do backward. Nenhuma chamada em Python é feita para eles, a não ser que haja um
    comm hook registrado: o commviz registra um que faz a mesma conta, e é assim que esses
    buckets aparecem aqui (marcados "pelo DDP").""",
)
_TIP_REDUCE_OPS = _t(
    """ReduceOp.SUM, AVG, MAX, MIN and PRODUCT work on both backends; PREMUL_SUM is NCCL
    only, gloo refuses it.""",
    """ReduceOp.SUM, AVG, MAX, MIN e PRODUCT funcionam nos dois backends; PREMUL_SUM é só do
    NCCL, o gloo recusa.""",
)
_TIP_SCATTER_FREE = _t(
    """scatter does not release the source list on the src rank: once the call returns, drop
    it (del it, or set it to None) so that its memory can be reused.""",
    """O scatter não libera a lista de origem no rank src: quando a chamada terminar,
    descarte-a (com del, ou atribuindo None) para que a memória possa ser reaproveitada.""",
)
_TIP_ROOT_LINK = _t(
    """Every byte goes in or out through the root's link, which becomes the bottleneck as
    the group grows: n-1 messages share that one link while the others sit idle.""",
    """Todos os bytes entram ou saem pela ligação do root, que vira o gargalo conforme o
    grupo cresce: n-1 mensagens dividem essa única ligação enquanto as outras ficam
    ociosas.""",
)
_TIP_PICKLE = _t(
    """Object collectives unpickle whatever arrives: use them only between processes you
    trust, and keep them out of hot loops; pickling, the extra size exchange and (on NCCL) the
    copies to and from the GPU cost far more than sending a tensor.""",
    """As coletivas de objetos fazem unpickle de tudo o que chega: use só entre processos
    confiáveis e deixe-as fora de loops críticos; o pickle, a troca extra de tamanhos e (no
    NCCL) as cópias de ida e volta para a GPU custam bem mais que mandar um tensor.""",
)
_TIP_OBJ_DEVICE = _t(
    """On NCCL the byte tensors live on torch.cuda.current_device(): call
    torch.cuda.set_device(local_rank) first, or several ranks may end up sharing GPU 0.""",
    """No NCCL os tensores de bytes ficam em torch.cuda.current_device(): chame
    torch.cuda.set_device(local_rank) antes, senão vários ranks podem acabar usando a mesma
    GPU 0.""",
)


# --- One entry per family ------------------------------------------------------------------
# Fields: title, what, how (backend -> text), when: each a {lang: text}; tips: a tuple of them.

_ENTRIES: dict[str, dict[str, Any]] = {
    "send": {
        "title": _t("send: hand a tensor to one specific rank",
                    "send: entrega um tensor a um rank específico"),
        "what": _t(
            """Point-to-point: this rank ships one tensor to exactly one other rank (dst),
            like handing a parcel to a single colleague. dst must post a matching recv with
            the same size and dtype, or both sides wait forever.""",
            """Ponto a ponto: este rank manda um tensor para exatamente um outro rank (dst),
            como entregar um pacote em mãos a um único colega. O dst precisa chamar um recv
            correspondente, com o mesmo tamanho e dtype; sem isso, os dois lados ficam
            esperando para sempre.""",
        ),
        "how": {
            "gloo": _t(
                """The bytes go straight from this process to dst over the TCP pair gloo
                keeps for these two ranks; the call blocks the CPU thread until the whole
                buffer has been written out.""",
                """Os bytes saem deste processo direto para o dst pelo par TCP que o gloo
                mantém para esses dois ranks; a chamada bloqueia a thread da CPU até o buffer
                inteiro ter sido enviado.""",
            ),
            "nccl": _t(
                """An ncclSend kernel on the GPU pushes the tensor to dst over the best link
                NCCL found (NVLink/PCIe P2P, shared memory or the network); the host returns
                once the kernel is queued, and the link to a new peer is built on first
                use.""",
                """Um kernel ncclSend na GPU empurra o tensor até o dst pelo melhor caminho
                que o NCCL encontrou (P2P via NVLink/PCIe, memória compartilhada ou rede); o
                host volta assim que o kernel entra na fila, e a conexão com um peer novo é
                montada no primeiro uso.""",
            ),
        },
        "when": _t(
            """Pipeline parallelism (activations forward, gradients back between stages) and
            any exchange between a fixed pair of ranks. When a whole group must combine or
            share data, a collective is faster and simpler than hand-written send loops.""",
            """Paralelismo de pipeline (ativações indo para frente e gradientes voltando
            entre estágios) e qualquer troca entre um par fixo de ranks. Quando o grupo
            inteiro precisa combinar ou compartilhar dados, uma coletiva é mais rápida e mais
            simples que laços de send escritos à mão.""",
        ),
        "tips": (_TIP_FIRST_P2P, _TIP_NCCL_DEBUG, _TIP_NETWORK),
    },
    "recv": {
        "title": _t("recv: wait for a tensor from one rank",
                    "recv: espera um tensor vindo de um rank"),
        "what": _t(
            """The mirror of send: this rank fills a tensor it already allocated with the data
            coming from src. recv allocates nothing, so the buffer must have the right shape
            and dtype beforehand.""",
            """O espelho do send: este rank preenche um tensor que ele mesmo já alocou com os
            dados que vêm do src. O recv não aloca nada, então o buffer precisa estar com o
            shape e o dtype certos antes da chamada.""",
        ),
        "how": {
            "gloo": _t(
                """gloo posts a receive on the TCP pair from src and the calling thread
                sleeps until every byte has landed in the tensor; with src=None it accepts
                whichever rank sends first.""",
                """O gloo posta um recebimento no par TCP vindo do src e a thread que chamou
                dorme até o último byte cair no tensor; com src=None ele aceita o rank que
                enviar primeiro.""",
            ),
            "nccl": _t(
                """An ncclRecv kernel waits on the GPU for src's matching ncclSend and
                writes straight into the tensor; the host normally returns once the kernel is
                queued, except for the first recv, and src must be given explicitly.""",
                """Um kernel ncclRecv espera na GPU pelo ncclSend correspondente do src e
                escreve direto no tensor; o host normalmente volta assim que o kernel entra
                na fila, menos no primeiro recv, e o src tem de ser informado
                explicitamente.""",
            ),
        },
        "when": _t(
            """Always paired with a send on the other side: pipeline stages, a parameter
            server, a rank handing results to another. For many-to-one patterns, gather or
            reduce usually do the job with less code.""",
            """Sempre em par com um send do outro lado: estágios de pipeline, um servidor de
            parâmetros, um rank repassando resultados para outro. Para padrões de muitos para
            um, gather ou reduce costumam resolver com menos código.""",
        ),
        "tips": (_TIP_FIRST_P2P, _TIP_WAIT_SYNC, _TIP_NCCL_DEBUG),
    },
    "isend": {
        "title": _t("isend: start a send and keep working",
                    "isend: inicia um envio e segue trabalhando"),
        "what": _t(
            """Non-blocking send: the call returns a request at once and the transfer runs in
            the background. The data is only guaranteed to be gone once request.wait() (or
            is_completed()) says so.""",
            """Envio não bloqueante: a chamada devolve um request na hora e a transferência
            corre em segundo plano. Só dá para considerar os dados enviados quando
            request.wait() (ou is_completed()) confirmar.""",
        ),
        "how": {
            "gloo": _t(
                """Same TCP pair as send, but the work is queued and the call returns
                immediately; request.wait() then blocks the CPU thread until the buffer has
                been sent.""",
                """Mesmo par TCP do send, mas o trabalho vai para a fila e a chamada volta na
                hora; depois, request.wait() bloqueia a thread da CPU até o buffer ter sido
                enviado.""",
            ),
            "nccl": _t(
                """The same ncclSend kernel as send, launched on NCCL's own communication
                stream; request.wait() makes the current CUDA stream wait for it without
                blocking the CPU.""",
                """O mesmo kernel ncclSend do send, lançado na stream de comunicação do
                próprio NCCL; request.wait() faz a stream CUDA atual esperar por ele sem
                bloquear a CPU.""",
            ),
        },
        "when": _t(
            """When there is other work to do meanwhile (overlap), or when two ranks must send
            to each other at the same time: posting both sides non-blocking avoids two
            blocking sends waiting on each other.""",
            """Quando há outro trabalho para fazer enquanto isso (sobreposição), ou quando dois
            ranks precisam enviar um para o outro ao mesmo tempo: postar os dois lados sem
            bloquear evita dois sends bloqueantes esperando um pelo outro.""",
        ),
        "tips": (_TIP_OVERLAP, _TIP_DONT_TOUCH, _TIP_WAIT_SYNC, _TIP_FIRST_P2P),
    },
    "irecv": {
        "title": _t("irecv: start a receive and keep working",
                    "irecv: inicia um recebimento e segue trabalhando"),
        "what": _t(
            """Non-blocking receive: it returns a request at once while the tensor fills in
            the background. Read the tensor only after request.wait() returns.""",
            """Recebimento não bloqueante: devolve um request na hora enquanto o tensor é
            preenchido em segundo plano. Só leia o tensor depois que request.wait()
            retornar.""",
        ),
        "how": {
            "gloo": _t(
                """gloo posts the receive on the TCP pair from src and returns; wait() blocks
                the CPU thread until every byte has arrived.""",
                """O gloo posta o recebimento no par TCP vindo do src e retorna; o wait()
                bloqueia a thread da CPU até o último byte chegar.""",
            ),
            "nccl": _t(
                """An ncclRecv kernel on NCCL's communication stream; wait() orders the
                current CUDA stream after it, so kernels launched afterwards see the data,
                while the CPU keeps going.""",
                """Um kernel ncclRecv na stream de comunicação do NCCL; o wait() coloca a
                stream CUDA atual depois dele, de modo que os kernels lançados em seguida
                enxergam os dados, enquanto a CPU continua livre.""",
            ),
        },
        "when": _t(
            """Post it before the matching sender is ready and do useful work until the data
            is needed: the classic way to overlap communication with compute in pipeline
            stages or halo exchanges.""",
            """Poste antes de quem envia estar pronto e faça trabalho útil até precisar dos
            dados: é o jeito clássico de sobrepor comunicação e cálculo em estágios de
            pipeline ou em trocas de borda (halo).""",
        ),
        "tips": (_TIP_OVERLAP, _TIP_DONT_TOUCH, _TIP_WAIT_SYNC, _TIP_FIRST_P2P),
    },
    "batch_isend_irecv": {
        "title": _t("batch_isend_irecv: post many sends and receives as one batch",
                    "batch_isend_irecv: posta vários envios e recebimentos num lote só"),
        "what": _t(
            """Takes a list of P2POp (isend or irecv plus a peer) and starts them all
            together, returning one request per op. Since the whole list is posted at once,
            the order of sends and receives inside it cannot cause a deadlock.""",
            """Recebe uma lista de P2POp (isend ou irecv mais o peer) e dispara todas juntas,
            devolvendo um request para cada uma. Como a lista inteira é postada de uma vez, a
            ordem dos envios e recebimentos dentro dela não tem como causar deadlock.""",
        ),
        "how": {
            "gloo": _t(
                """gloo posts each isend and irecv of the list in turn without waiting, so
                they are all in flight together, each on the TCP pair of its peer.""",
                """O gloo posta cada isend e irecv da lista em sequência, sem esperar, então
                todos ficam em andamento ao mesmo tempo, cada um no par TCP do seu peer.""",
            ),
            "nccl": _t(
                """The list is wrapped in one NCCL group (ncclGroupStart/ncclGroupEnd): every
                send and receive is launched as a single fused operation on the communication
                stream.""",
                """A lista é embrulhada num único grupo NCCL (ncclGroupStart/ncclGroupEnd):
                todos os envios e recebimentos são lançados como uma só operação fundida na
                stream de comunicação.""",
            ),
        },
        "when": _t(
            """Ring or halo exchanges where every rank sends to one neighbour and receives
            from another, pipeline stages that send and receive in the same iteration, and any
            pattern where blocking pairs could wait on each other.""",
            """Trocas em anel ou de borda, em que cada rank envia para um vizinho e recebe de
            outro, estágios de pipeline que enviam e recebem na mesma iteração e qualquer padrão
            em que pares bloqueantes poderiam ficar esperando um pelo outro.""",
        ),
        "tips": (
            _t("""On NCCL, set the device with torch.cuda.set_device first, and if this is the
                first call on the group, every rank of the group must take part in it.""",
               """No NCCL, defina o dispositivo com torch.cuda.set_device antes e, se esta for
               a primeira chamada no grupo, todos os ranks do grupo precisam participar
               dela."""),
            _TIP_OVERLAP, _TIP_FIRST_P2P,
        ),
    },
    "broadcast": {
        "title": _t("broadcast: one rank's tensor copied to everyone",
                    "broadcast: o tensor de um rank copiado para todos"),
        "what": _t(
            """The src (root) rank holds a tensor and after the call every rank of the group
            holds an identical copy, like a teacher handing the same worksheet to the whole
            class. The other ranks' tensors must already have the right shape; their old
            content is overwritten.""",
            """O rank src (root) tem um tensor e, depois da chamada, todos os ranks do grupo
            têm uma cópia idêntica, como um professor distribuindo a mesma folha de
            exercícios para a turma toda. Nos outros ranks o tensor já precisa ter o shape
            certo; o conteúdo antigo é sobrescrito.""",
        ),
        "how": {
            "gloo": _t(
                """A binomial tree over virtual ranks v = (rank-src) mod n: in step 0 v0
                sends to v1, in step 1 v0 sends to v2 while v1 sends to v3, and so on; the
                holders double each step and the whole buffer moves at every hop, so about
                log2(n) steps.""",
                """Uma árvore binomial sobre ranks virtuais v = (rank-src) mod n: no passo
                0 o v0 envia para o v1, no passo 1 o v0 envia para o v2 enquanto o v1 envia
                para o v3, e assim por diante; quem já tem os dados dobra a cada passo e o
                buffer inteiro viaja em cada salto, então são cerca de log2(n) passos.""",
            ),
            "nccl": _t(
                """A pipelined chain along the ring, starting at the root (root 0:
                0 -> 1 -> 2 -> 3). The buffer is cut into chunks and at step t hop h carries
                chunk t-h, so m chunks take m+n-2 steps and every link stays busy.""",
                """Uma cadeia em pipeline ao longo do anel, começando no root (root 0:
                0 -> 1 -> 2 -> 3). O buffer é cortado em pedaços e, no passo t, o salto h
                leva o pedaço t-h; assim m pedaços levam m+n-2 passos e todas as
                ligações ficam ocupadas.""",
            ),
        },
        "when": _t(
            """Distributing initial weights, hyperparameters or a random seed from one rank
            to all. Cheaper and simpler than n-1 sends from the root.""",
            """Para distribuir pesos iniciais, hiperparâmetros ou uma semente aleatória de um
            rank para todos. Sai mais barato e mais simples que n-1 sends a partir do
            root.""",
        ),
        "tips": (
            _t("""Broadcast the starting weights (or load a checkpoint on rank 0 and broadcast
               it) so every replica begins identical; DistributedDataParallel does this for
               you when it wraps the model.""",
               """Faça broadcast dos pesos iniciais (ou carregue o checkpoint no rank 0 e faça
               broadcast dele) para todas as réplicas começarem iguais; o
               DistributedDataParallel já faz isso sozinho ao envolver o modelo."""),
            _TIP_NCCL_DEBUG,
        ),
    },
    "all_reduce": {
        "title": _t("all_reduce: combine everyone's tensor, everyone gets the result",
                    "all_reduce: combina o tensor de todos e todos recebem o resultado"),
        "what": _t(
            """Each rank brings a tensor; they are combined element by element (sum, average,
            max...) and every rank ends with the same result, in place, like friends adding
            up their receipts so that each one leaves knowing the total.""",
            """Cada rank entra com um tensor; eles são combinados elemento a elemento (soma,
            média, máximo...) e todos os ranks terminam com o mesmo resultado, no próprio
            tensor, como amigos somando o que cada um gastou para que todos saiam sabendo o
            total.""",
        ),
        "how": {
            "gloo": _t(
                """A ring in which each rank sends to its previous neighbour (rank-1) and
                receives from the next one (rank+1). The buffer is split into n chunks:
                n-1 reduce-scatter steps leave rank r owning finished chunk r, then n-1
                all-gather steps pass the finished chunks around, 2(n-1) steps in all, each
                chunk pipelined in at least two segments.""",
                """Um anel (ring) em que cada rank envia para o vizinho anterior (rank-1) e
                recebe do seguinte (rank+1). O buffer é dividido em n pedaços: n-1 passos
                de reduce-scatter deixam o rank r com o pedaço r pronto, depois n-1 passos
                de all-gather fazem os pedaços prontos circularem, 2(n-1) passos no total,
                cada pedaço em pelo menos dois segmentos.""",
            ),
            "nccl": _t(
                """Usually a ring in the order NCCL logged at init, each rank sending to the
                next: one fused pass of 2(n-1) steps, a reduce-scatter followed by an
                all-gather of the finished chunks. For some sizes NCCL picks a tree instead
                (reduce up, broadcast down; a double binary tree across nodes, a chain inside
                a node), or NVLS/CollNet on hardware that has them.""",
                """Em geral um anel na ordem que o NCCL registrou no init, cada rank enviando
                para o seguinte: uma passada fundida de 2(n-1) passos, um reduce-scatter
                seguido de um all-gather dos pedaços prontos. Para alguns tamanhos o NCCL
                escolhe uma árvore (reduz subindo, distribui descendo; árvore binária dupla
                entre nós, cadeia dentro de um nó), ou NVLS/CollNet no hardware que
                suporta.""",
            ),
        },
        "when": _t(
            """Averaging gradients in data parallelism and any global figure every rank needs
            (loss, norm, counters). Prefer it to reduce + broadcast: one op, and each rank
            sends only about 2(n-1)/n of the buffer.""",
            """Média de gradientes no paralelismo de dados e qualquer número global de que
            todo rank precisa (loss, norma, contadores). É melhor que reduce + broadcast: uma
            operação só, e cada rank envia só cerca de 2(n-1)/n do buffer.""",
        ),
        "tips": (_TIP_DDP, _TIP_REDUCE_OPS, _TIP_NETWORK, _TIP_NCCL_DEBUG),
    },
    "reduce": {
        "title": _t("reduce: combine everyone's tensor onto one rank",
                    "reduce: combina o tensor de todos em um único rank"),
        "what": _t(
            """Like all_reduce, except that only dst receives the combined result, like
            ballots from every table brought to a single counter. The other ranks contribute
            and get nothing back.""",
            """Igual ao all_reduce, só que apenas o dst recebe o resultado combinado, como
            votos de todas as urnas levados a uma única apuração. Os outros ranks contribuem
            e não recebem nada de volta.""",
        ),
        "how": {
            "gloo": _t(
                """A ring reduce-scatter in which each rank sends toward rank-1; then every
                rank sends its finished chunk to dst.""",
                """Um reduce-scatter em anel, com cada rank enviando na direção do rank-1;
                depois cada rank manda o seu pedaço pronto para o dst.""",
            ),
            "nccl": _t(
                """A chain that starts at the rank after the root and ends at the root (root
                0: 1 -> 2 -> 3 -> 0); each hop adds its own contribution to the partial result
                it passes on, chunk by chunk.""",
                """Uma cadeia que começa no rank logo depois do root e termina no root (root
                0: 1 -> 2 -> 3 -> 0); cada salto soma a sua contribuição ao resultado parcial
                que repassa, pedaço por pedaço.""",
            ),
        },
        "when": _t(
            """When only one rank needs the total, such as metrics logged by rank 0. If every
            rank needs it, use all_reduce instead of reduce + broadcast.""",
            """Quando só um rank precisa do total, por exemplo métricas registradas pelo rank
            0. Se todos precisam, use all_reduce em vez de reduce + broadcast.""",
        ),
        "tips": (
            _t("""Only dst is guaranteed the result: treat the tensor on the other ranks as
               undefined after the call, since some backends leave partial sums in it.""",
               """Só o dst tem garantia de receber o resultado: considere o tensor dos outros
               ranks indefinido depois da chamada, porque alguns backends deixam somas
               parciais nele."""),
            _TIP_REDUCE_OPS, _TIP_NCCL_DEBUG,
        ),
    },
    "all_gather": {
        "title": _t("all_gather: everyone gets everyone's block",
                    "all_gather: todo mundo recebe o bloco de todo mundo"),
        "what": _t(
            """Every rank contributes one block and every rank ends with all n blocks in rank
            order, like each student writing one page and everyone getting the bound
            booklet. This form fills a list of n tensors.""",
            """Cada rank contribui com um bloco e todos terminam com os n blocos em ordem de
            rank, como cada aluno escrevendo uma página e todo mundo recebendo a apostila
            encadernada. Esta forma preenche uma lista de n tensores.""",
        ),
        "how": {
            "gloo": _t(
                """A ring that sends to rank+1: in the first step each rank passes its own
                block to the next, then it forwards the block it just received, n-1 steps
                in all; each block travels in two halves.""",
                """Um anel que envia para o rank+1: no primeiro passo cada rank passa o
                próprio bloco para o seguinte e depois repassa o bloco que acabou de receber,
                n-1 passos no total; cada bloco viaja em duas metades.""",
            ),
            "nccl": _t(
                """A ring of n-1 steps in the order logged at init: step 0 sends the rank's
                own block to the next rank and later steps forward what arrived, so each rank
                sends (n-1)/n of the final size.""",
                """Um anel de n-1 passos na ordem registrada no init: o passo 0 envia o
                bloco do próprio rank para o seguinte e os passos seguintes repassam o que
                chegou, então cada rank envia (n-1)/n do tamanho final.""",
            ),
        },
        "when": _t(
            """Rebuilding sharded parameters (FSDP, ZeRO-3) and collecting embeddings or
            metrics that every rank needs. If only one rank needs them, gather is
            enough.""",
            """Para remontar parâmetros fragmentados (FSDP, ZeRO-3) e juntar embeddings ou
            métricas de que todo rank precisa. Se só um rank precisa, o gather basta.""",
        ),
        "tips": (
            _t("""Every rank must bring a block of the same size: gloo rejects uneven
               all_gather ("invalid tensor size"), so pad the blocks to a common length.""",
               """Todo rank precisa entrar com um bloco do mesmo tamanho: o gloo rejeita
               all_gather desigual ("invalid tensor size"), então complete os blocos até um
               comprimento comum."""),
            _TIP_NETWORK,
        ),
    },
    "gather": {
        "title": _t("gather: everyone's block collected on one rank",
                    "gather: o bloco de cada um recolhido em um único rank"),
        "what": _t(
            """Every rank sends one tensor and only dst receives the list of all n, like
            students handing their exam papers to the teacher. The other ranks pass no
            gather_list.""",
            """Cada rank envia um tensor e só o dst recebe a lista com os n, como alunos
            entregando a prova para o professor. Os outros ranks não passam
            gather_list.""",
        ),
        "how": {
            "gloo": _t(
                """Flat: dst posts n-1 receives at once and every other rank sends its
                tensor straight to dst; nothing is relayed, so dst's link carries all the
                traffic.""",
                """Plano: o dst posta n-1 recebimentos de uma vez e cada um dos outros ranks
                envia o seu tensor direto para ele; nada é repassado, então a ligação do dst
                carrega todo o tráfego.""",
            ),
            "nccl": _t(
                """NCCL has no gather kernel: PyTorch turns it into one group of send/recv,
                every rank sending to dst and dst receiving from each of them.""",
                """O NCCL não tem kernel de gather: o PyTorch transforma a chamada num grupo
                de send/recv, com cada rank enviando para o dst e o dst recebendo de cada
                um.""",
            ),
        },
        "when": _t(
            """Collecting predictions, results or logs on one rank to save or evaluate them.
            Prefer all_gather when every rank needs the data.""",
            """Para juntar previsões, resultados ou logs em um rank e salvar ou avaliar. Prefira
            all_gather quando todos os ranks precisam dos dados.""",
        ),
        "tips": (_TIP_ROOT_LINK, _TIP_NETWORK),
    },
    "scatter": {
        "title": _t("scatter: one rank deals a different block to each rank",
                    "scatter: um rank distribui um bloco diferente para cada rank"),
        "what": _t(
            """The src rank holds a list of n tensors and tensor i goes to rank i, like
            dealing cards: each player gets a different one. Every rank receives its block
            into its output tensor.""",
            """O rank src tem uma lista de n tensores e o tensor i vai para o rank i, como
            dar as cartas num jogo: cada jogador recebe uma diferente. Cada rank recebe o seu
            bloco no tensor de saída.""",
        ),
        "how": {
            "gloo": _t(
                """Flat: src posts n-1 sends at once, one per rank, and each other rank
                posts one receive; src copies its own block locally.""",
                """Plano: o src posta n-1 envios de uma vez, um por rank, e cada um dos
                outros posta um recebimento; o src copia o próprio bloco localmente.""",
            ),
            "nccl": _t(
                """NCCL has no scatter kernel: PyTorch issues it as one group of send/recv
                from src to every rank.""",
                """O NCCL não tem kernel de scatter: o PyTorch emite a chamada como um grupo
                de send/recv do src para cada rank.""",
            ),
        },
        "when": _t(
            """Handing out distinct work from one rank: data shards, index ranges, initial
            partitions. If everyone should get the same data, use broadcast.""",
            """Para distribuir trabalho diferente a partir de um rank: fatias dos dados,
            faixas de índices, partições iniciais. Se todos devem receber os mesmos dados,
            use broadcast.""",
        ),
        "tips": (_TIP_SCATTER_FREE, _TIP_ROOT_LINK),
    },
    "reduce_scatter": {
        "title": _t("reduce_scatter: combine everyone's tensors, each rank keeps one slice",
                    "reduce_scatter: combina os tensores de todos e cada rank fica com uma "
                    "fatia"),
        "what": _t(
            """Each rank brings n blocks; block i of every rank is reduced and the result
            lands on rank i only. It is the first half of an all_reduce, stopping when each
            rank owns one finished piece.""",
            """Cada rank entra com n blocos; o bloco i de todos os ranks é reduzido e o
            resultado vai só para o rank i. É a primeira metade de um all_reduce, parando
            quando cada rank tem um pedaço pronto.""",
        ),
        "how": {
            "gloo": _t(
                """gloo has no reduce-scatter algorithm of its own: for this list form PyTorch
                runs one all_reduce per block, n all_reduces of one block each (the ring
                toward rank-1, 2(n-1) steps each: 24 steps at n=4), and rank r keeps
                block r. It moves as many bytes as one all_reduce of the whole input, not the
                (n-1)/n of a true reduce-scatter.""",
                """O gloo não tem algoritmo próprio de reduce-scatter: nesta forma com lista o
                PyTorch roda um all_reduce por bloco, n all_reduces de um bloco cada (o anel
                na direção do rank-1, 2(n-1) passos cada: 24 passos com n=4), e o rank
                r guarda o bloco r. A operação move tantos bytes quanto um all_reduce da
                entrada inteira, e não os (n-1)/n de um reduce-scatter de verdade.""",
            ),
            "nccl": _t(
                """A ring of n-1 steps: at each step a rank adds its contribution to the
                partial sum it received and passes it on, so each block gains one
                contribution per hop; at the end rank r adds its own input to block r and
                holds the result.""",
                """Um anel de n-1 passos: a cada passo o rank soma a sua contribuição à
                soma parcial que recebeu e a repassa, então cada bloco ganha uma contribuição
                por salto; no fim o rank r soma a própria entrada ao bloco r e fica com o
                resultado.""",
            ),
        },
        "when": _t(
            """Sharded data parallelism (ZeRO, FSDP): each rank only needs the reduced
            gradients of the parameters it owns. On NCCL it sends half the bytes of an
            all_reduce.""",
            """Paralelismo de dados fragmentado (ZeRO, FSDP): cada rank só precisa dos
            gradientes reduzidos dos parâmetros que são dele. No NCCL ele envia metade dos
            bytes de um all_reduce.""",
        ),
        "tips": (
            _t("""On gloo a reduce_scatter costs as much as an all_reduce, so measure there
               only to learn the semantics; the savings appear on NCCL.""",
               """No gloo um reduce_scatter custa tanto quanto um all_reduce, então use essas
               medições só para aprender a semântica; a economia aparece no NCCL."""),
            _TIP_REDUCE_OPS, _TIP_NCCL_DEBUG,
        ),
    },
    "all_to_all": {
        "title": _t("all_to_all: every rank sends a different block to every rank",
                    "all_to_all: cada rank envia um bloco diferente para cada rank"),
        "what": _t(
            """Each rank splits its data into n blocks and sends block j to rank j, receiving
            in return the block meant for it from everyone: a transpose of data across
            ranks, like every guest swapping a personal note with every other guest.""",
            """Cada rank divide os seus dados em n blocos e manda o bloco j para o rank j,
            recebendo de volta de todos o bloco destinado a ele: uma transposição dos dados
            entre os ranks, como cada convidado trocando um bilhete pessoal com todos os
            outros.""",
        ),
        "how": {
            "gloo": _t(
                """All n-1 sends (to rank+i) and all n-1 receives (from rank-i) are
                posted at once, so every pair exchanges directly and in parallel.""",
                """Os n-1 envios (para o rank+i) e os n-1 recebimentos (do rank-i) são
                postados de uma vez, então cada par troca dados diretamente e em
                paralelo.""",
            ),
            "nccl": _t(
                """No dedicated kernel: PyTorch issues one NCCL group of n-1 sends and n-1
                receives, one per peer, so all pairs exchange concurrently over their own
                links.""",
                """Sem kernel dedicado: o PyTorch emite um grupo NCCL com n-1 envios e n-1
                recebimentos, um por peer, e todos os pares trocam dados ao mesmo tempo pelas
                suas próprias ligações.""",
            ),
        },
        "when": _t(
            """Routing tokens to experts in mixture-of-experts models and switching which
            dimension a tensor is sharded on (sequence vs. heads). Every link is busy at
            once, so it is the collective most sensitive to the slowest link.""",
            """Para rotear tokens para os experts em modelos mixture-of-experts e para trocar
            a dimensão em que um tensor está fragmentado (sequência vs. heads). Todas as
            ligações trabalham ao mesmo tempo, então é a coletiva mais sensível à ligação
            mais lenta.""",
        ),
        "tips": (_TIP_NETWORK, _TIP_NCCL_DEBUG),
    },
    "barrier": {
        "title": _t("barrier: nobody goes on until everyone arrives",
                    "barrier: ninguém segue até todo mundo chegar"),
        "what": _t(
            """A meeting point with no useful data: each rank blocks until every rank of the
            group has reached the barrier, like waiting at the door until the whole party
            has arrived before going in.""",
            """Um ponto de encontro sem dados úteis: cada rank fica bloqueado até todos os
            ranks do grupo chegarem à barreira, como esperar na porta até a turma toda chegar
            antes de entrar.""",
        ),
        "how": {
            "gloo": _t(
                """Dissemination: in round k each rank sends a tiny message to rank+2^k and
                waits for one from rank-2^k (distances 1, 2, 4...), so after about log2(n)
                rounds every rank knows that all have arrived.""",
                """Disseminação: na rodada k cada rank envia uma mensagem minúscula para o
                rank+2^k e espera uma do rank-2^k (distâncias 1, 2, 4...), então depois de
                cerca de log2(n) rodadas todo rank sabe que todos chegaram.""",
            ),
            "nccl": _t(
                """PyTorch runs an all_reduce of a one-element tensor on each rank's GPU and
                then makes the host wait for the current CUDA stream, so the barrier also
                waits for the work queued before it.""",
                """O PyTorch roda um all_reduce de um tensor de um elemento na GPU de cada
                rank e depois faz o host esperar a stream CUDA atual, então a barreira também
                espera o trabalho que estava na fila antes dela.""",
            ),
        },
        "when": _t(
            """Before timing a section, around checkpoint saving or file-system work, and
            while debugging. Avoid it in the training loop: collectives already synchronize
            the data they touch, and each barrier costs a full round of latency.""",
            """Antes de cronometrar um trecho, em volta do salvamento de checkpoints ou de
            operações no sistema de arquivos, e durante a depuração. Evite no loop de
            treino: as coletivas já sincronizam os dados que usam, e cada barreira custa uma
            rodada inteira de latência.""",
        ),
        "tips": (
            _t("""On NCCL, call torch.cuda.set_device(local_rank) before the first barrier,
               otherwise PyTorch has to guess which GPU to run it on.""",
               """No NCCL, chame torch.cuda.set_device(local_rank) antes da primeira barreira,
               senão o PyTorch precisa adivinhar em qual GPU rodá-la."""),
            _TIP_WAIT_SYNC,
        ),
    },
    "monitored_barrier": {
        "title": _t("monitored_barrier: a barrier that names the ranks that never came",
                    "monitored_barrier: uma barreira que aponta os ranks que não chegaram"),
        "what": _t(
            """A barrier with a timeout that reports which ranks failed to arrive instead of
            hanging forever, a roll call for the group. Only implemented for gloo.""",
            """Uma barreira com timeout que informa quais ranks não chegaram, em vez de ficar
            travada para sempre: uma chamada de presença do grupo. Só existe para o
            gloo.""",
        ),
        "how": {
            "gloo": _t(
                """Not a dissemination barrier: every other rank sends a small message to rank
                0 and waits for its answer; rank 0 receives from each rank with the timeout,
                reports the missing ones, then replies to all.""",
                """Não é uma barreira por disseminação: cada um dos outros ranks manda uma
                mensagem pequena para o rank 0 e espera a resposta; o rank 0 recebe de cada
                rank respeitando o timeout, aponta os que faltaram e depois responde a
                todos.""",
            ),
            "nccl": _t(
                """Not supported on an NCCL group. In an NCCL job, create a side group with
                dist.new_group(backend="gloo") and call monitored_barrier on it; its messages
                travel over TCP on the CPU.""",
                """Não é suportada em grupo NCCL. Num job NCCL, crie um grupo auxiliar com
                dist.new_group(backend="gloo") e chame monitored_barrier nele; as mensagens
                trafegam por TCP, na CPU.""",
            ),
        },
        "when": _t(
            """Hunting hangs and desyncs: place it where all ranks should meet and it tells
            you which rank is stuck. Too slow for the training hot path.""",
            """Para caçar travamentos e dessincronizações: coloque onde todos os ranks deveriam
            se encontrar e ela diz qual rank está preso. Lenta demais para o caminho crítico
            do treino.""",
        ),
        "tips": (
            _t("""Pass wait_all_ranks=True to get the list of every rank that missed the
               timeout, not just the first one rank 0 noticed.""",
               """Passe wait_all_ranks=True para receber a lista de todos os ranks que
               estouraram o timeout, e não só o primeiro que o rank 0 percebeu."""),
            _t("""TORCH_DISTRIBUTED_DEBUG=DETAIL adds a check that every rank called the same
               collective with matching sizes, which catches many desyncs early.""",
               """TORCH_DISTRIBUTED_DEBUG=DETAIL acrescenta uma verificação de que todos os
               ranks chamaram a mesma coletiva com tamanhos compatíveis, o que pega muitas
               dessincronizações cedo."""),
        ),
    },
    "all_gather_object": {
        "title": _t("all_gather_object: every rank gets every rank's Python object",
                    "all_gather_object: cada rank recebe o objeto Python de todos"),
        "what": _t(
            """all_gather for any picklable Python object: each rank pickles its object into a
            byte tensor, a first all_gather shares the sizes, a second moves the payloads
            padded to the largest size, and every rank unpickles the full list.""",
            """O all_gather para qualquer objeto Python serializável com pickle: cada rank
            transforma o seu objeto num tensor de bytes, um primeiro all_gather troca os
            tamanhos, um segundo move os conteúdos completados até o maior tamanho e cada
            rank desserializa a lista inteira.""",
        ),
        "how": {
            "gloo": _t(
                """Both inner all_gathers run gloo's ring toward rank+1 on CPU byte
                tensors.""",
                """Os dois all_gathers internos rodam o anel do gloo na direção do rank+1,
                com tensores de bytes na CPU.""",
            ),
            "nccl": _t(
                """The byte tensors are copied to the current CUDA device, both all_gathers
                run as NCCL rings, and the results come back to the host to be
                unpickled.""",
                """Os tensores de bytes são copiados para o dispositivo CUDA atual, os dois
                all_gathers rodam como anéis do NCCL e os resultados voltam para o host para
                serem desserializados.""",
            ),
        },
        "when": _t(
            """Small, irregular metadata: config dicts, per-rank lists of strings, counts of
            varying shape. For numbers, use the tensor collectives.""",
            """Metadados pequenos e irregulares: dicionários de configuração, listas de
            strings por rank, contagens de formato variável. Para números, use as coletivas
            de tensores.""",
        ),
        "tips": (_TIP_PICKLE, _TIP_OBJ_DEVICE),
    },
    "broadcast_object_list": {
        "title": _t("broadcast_object_list: one rank's Python objects copied to everyone",
                    "broadcast_object_list: os objetos Python de um rank copiados para todos"),
        "what": _t(
            """src pickles each object of the list into bytes; a first broadcast sends the
            sizes, a second broadcasts the concatenated payload, and the other ranks unpickle
            it into their own list, which must have the same length.""",
            """O src serializa com pickle cada objeto da lista; um primeiro broadcast manda os
            tamanhos, um segundo transmite o conteúdo concatenado, e os outros ranks
            desserializam tudo na própria lista, que precisa ter o mesmo comprimento.""",
        ),
        "how": {
            "gloo": _t(
                """Both broadcasts use gloo's binomial tree from src on CPU byte tensors.""",
                """Os dois broadcasts usam a árvore binomial do gloo a partir do src, com
                tensores de bytes na CPU.""",
            ),
            "nccl": _t(
                """Both broadcasts run as NCCL pipelined chains from src, on byte tensors
                placed on the current CUDA device.""",
                """Os dois broadcasts rodam como cadeias em pipeline do NCCL a partir do src,
                com tensores de bytes no dispositivo CUDA atual.""",
            ),
        },
        "when": _t(
            """Sharing a config, a vocabulary or any small Python state decided on one rank,
            typically at start-up.""",
            """Para compartilhar uma configuração, um vocabulário ou qualquer estado Python
            pequeno decidido em um rank, normalmente na inicialização.""",
        ),
        "tips": (_TIP_PICKLE, _TIP_OBJ_DEVICE),
    },
    "gather_object": {
        "title": _t("gather_object: everyone's Python object collected on one rank",
                    "gather_object: o objeto Python de cada rank recolhido em um só"),
        "what": _t(
            """Each rank pickles one object; first an all_gather of the sizes lets every rank
            learn the largest, then a gather brings the payloads, padded to that size, to dst,
            which unpickles the list. The other ranks pass object_gather_list=None.""",
            """Cada rank serializa um objeto com pickle; primeiro um all_gather dos tamanhos
            faz todo rank descobrir o maior, depois um gather leva ao dst os conteúdos,
            completados até esse tamanho, e o dst desserializa a lista. Os outros ranks
            passam object_gather_list=None.""",
        ),
        "how": {
            "gloo": _t(
                """The size exchange is gloo's ring all_gather; the payload gather is flat,
                dst receiving from every rank directly.""",
                """A troca de tamanhos é o all_gather em anel do gloo; o gather do conteúdo é
                plano, com o dst recebendo diretamente de cada rank.""",
            ),
            "nccl": _t(
                """The size exchange is an NCCL ring all_gather; the payload gather becomes
                grouped send/recv toward dst; both go through the current CUDA device.""",
                """A troca de tamanhos é um all_gather em anel do NCCL; o gather do conteúdo
                vira send/recv agrupados em direção ao dst; os dois passam pelo dispositivo
                CUDA atual.""",
            ),
        },
        "when": _t(
            """Collecting per-rank Python results (evaluation outputs, error reports) on one
            rank to log or save them.""",
            """Para juntar em um rank resultados Python de cada rank (saídas de avaliação,
            relatórios de erro) e registrar ou salvar.""",
        ),
        "tips": (_TIP_PICKLE, _TIP_OBJ_DEVICE),
    },
    "scatter_object_list": {
        "title": _t("scatter_object_list: one rank deals a different Python object to each",
                    "scatter_object_list: um rank distribui um objeto Python diferente a "
                    "cada um"),
        "what": _t(
            """src pickles one object per rank and pads them to one length; a broadcast shares
            that length, a scatter deals the padded payloads, and a second scatter delivers
            each object's true size so every rank can unpickle its own: three collectives
            here instead of two.""",
            """O src serializa um objeto por rank e completa todos até o mesmo comprimento;
            um broadcast informa esse comprimento, um scatter distribui os conteúdos e um
            segundo scatter entrega o tamanho real de cada objeto para que cada rank
            desserialize o seu: aqui são três coletivas em vez de duas.""",
        ),
        "how": {
            "gloo": _t(
                """The length broadcast uses gloo's binomial tree; both scatters are flat,
                src sending straight to each rank.""",
                """O broadcast do comprimento usa a árvore binomial do gloo; os dois scatters
                são planos, com o src enviando direto para cada rank.""",
            ),
            "nccl": _t(
                """The broadcast is an NCCL chain and the scatters become grouped send/recv
                from src, all on byte tensors on the current CUDA device.""",
                """O broadcast é uma cadeia do NCCL e os scatters viram send/recv agrupados a
                partir do src, tudo com tensores de bytes no dispositivo CUDA atual.""",
            ),
        },
        "when": _t(
            """Handing each rank its own piece of Python work (a list of files, a task
            description) from a coordinator rank.""",
            """Para entregar a cada rank a sua parte do trabalho em Python (uma lista de
            arquivos, a descrição de uma tarefa) a partir de um rank coordenador.""",
        ),
        "tips": (_TIP_PICKLE, _TIP_SCATTER_FREE, _TIP_OBJ_DEVICE),
    },
    "send_object_list": {
        "title": _t("send_object_list: send Python objects to one rank",
                    "send_object_list: envia objetos Python para um rank"),
        "what": _t(
            """Point-to-point for Python objects: the list is pickled, a first send carries
            the tensor of sizes to dst, a second carries the concatenated payload. dst must
            call recv_object_list with a list of the same length.""",
            """Ponto a ponto para objetos Python: a lista é serializada com pickle, um
            primeiro send leva o tensor de tamanhos ao dst e um segundo leva o conteúdo
            concatenado. O dst precisa chamar recv_object_list com uma lista do mesmo
            comprimento.""",
        ),
        "how": {
            "gloo": _t(
                """Two blocking sends on the TCP pair to dst: first the sizes, then the
                bytes.""",
                """Dois sends bloqueantes no par TCP até o dst: primeiro os tamanhos, depois
                os bytes.""",
            ),
            "nccl": _t(
                """Two NCCL sends from the current CUDA device; like any first NCCL transfer
                to a new peer, the first one also sets up the connection.""",
                """Dois sends do NCCL a partir do dispositivo CUDA atual; como em toda
                primeira transferência NCCL para um peer novo, o primeiro também monta a
                conexão.""",
            ),
        },
        "when": _t(
            """Passing small Python state between two ranks, such as a pipeline stage telling
            the next one about the shapes it will send.""",
            """Para passar um estado Python pequeno entre dois ranks, por exemplo um estágio
            de pipeline avisando o próximo sobre os shapes que vai enviar.""",
        ),
        "tips": (_TIP_PICKLE, _TIP_FIRST_P2P, _TIP_OBJ_DEVICE),
    },
    "recv_object_list": {
        "title": _t("recv_object_list: receive Python objects from one rank",
                    "recv_object_list: recebe objetos Python de um rank"),
        "what": _t(
            """The matching receive: it first gets the sizes, then the payload, and unpickles
            each object into the list you passed. With src=None on gloo, the payload is taken
            from whichever rank sent the sizes.""",
            """O recebimento correspondente: primeiro chegam os tamanhos, depois o conteúdo,
            e cada objeto é desserializado na lista que você passou. Com src=None no gloo, o
            conteúdo é lido do mesmo rank que mandou os tamanhos.""",
        ),
        "how": {
            "gloo": _t(
                """Two blocking receives on the TCP pair from src: first the sizes, then the
                bytes.""",
                """Dois recebimentos bloqueantes no par TCP vindo do src: primeiro os
                tamanhos, depois os bytes.""",
            ),
            "nccl": _t(
                """Two NCCL receives into the current CUDA device, then a copy back to the
                host to unpickle; src must be given explicitly.""",
                """Dois recebimentos do NCCL no dispositivo CUDA atual, depois uma cópia de
                volta para o host para desserializar; o src tem de ser informado
                explicitamente.""",
            ),
        },
        "when": _t(
            """Always paired with send_object_list on the other side; for tensors, plain recv
            is far cheaper.""",
            """Sempre em par com um send_object_list do outro lado; para tensores, o recv
            comum é muito mais barato.""",
        ),
        "tips": (_TIP_PICKLE, _TIP_FIRST_P2P, _TIP_OBJ_DEVICE),
    },
}

_TIP_SINGLE_NAME = _t(
    """Switch to the _single name: the old one prints a FutureWarning in torch 2.13 and simply
    forwards the call.""",
    """Troque para o nome _single: o antigo emite um FutureWarning no torch 2.13 e apenas
    repassa a chamada.""",
)

# The single-tensor reduce-scatter on gloo (also reached through reduce_scatter_tensor).
_RS_SINGLE_HOW = {
    "gloo": _t(
        """gloo runs one full all_reduce of the input (the ring toward rank-1, 2(n-1)
        steps) and each rank keeps slice r: 6 steps at n=4 where a true reduce-scatter
        needs 3.""",
        """O gloo roda um all_reduce completo da entrada (o anel na direção do rank-1,
        2(n-1) passos) e cada rank guarda a fatia r: 6 passos com n=4, onde um
        reduce-scatter de verdade precisaria de 3.""",
    ),
}

# variant -> (family, overrides). "extra_tips" are put before the family's tips.
_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "all_gather_into_tensor": ("all_gather", {
        "title": _t("all_gather_into_tensor: deprecated name of all_gather_single",
                    "all_gather_into_tensor: nome obsoleto (deprecated) de "
                    "all_gather_single"),
        "what": _t(
            """In torch 2.13 this is the deprecated name of all_gather_single, to which it
            forwards: every rank's block is gathered into one output tensor, concatenated or
            stacked along the first dimension.""",
            """No torch 2.13 este é o nome obsoleto de all_gather_single, para o qual a
            chamada é repassada: o bloco de cada rank é reunido num único tensor de saída,
            concatenado ou empilhado na primeira dimensão.""",
        ),
        "extra_tips": (_TIP_SINGLE_NAME,),
    }),
    "all_gather_single": ("all_gather", {
        "title": _t("all_gather_single: all_gather into one contiguous tensor",
                    "all_gather_single: all_gather num único tensor contíguo"),
        "what": _t(
            """The same result as all_gather, but the n blocks land in one output tensor n
            times as large (concatenated or stacked along dimension 0): no list of tensors
            and no extra copies. In torch 2.13 it replaces all_gather_into_tensor.""",
            """O mesmo resultado do all_gather, mas os n blocos caem num único tensor de
            saída n vezes maior (concatenados ou empilhados na dimensão 0): sem lista de
            tensores e sem cópias extras. No torch 2.13 ele substitui o
            all_gather_into_tensor.""",
        ),
    }),
    "reduce_scatter_tensor": ("reduce_scatter", {
        "title": _t("reduce_scatter_tensor: deprecated name of reduce_scatter_single",
                    "reduce_scatter_tensor: nome obsoleto (deprecated) de "
                    "reduce_scatter_single"),
        "what": _t(
            """In torch 2.13 this is the deprecated name of reduce_scatter_single, to which
            it forwards: one input tensor n times the output size is reduced across ranks and
            rank r keeps slice r.""",
            """No torch 2.13 este é o nome obsoleto de reduce_scatter_single, para o qual a
            chamada é repassada: um tensor de entrada n vezes maior que a saída é reduzido
            entre os ranks e o rank r fica com a fatia r.""",
        ),
        "how": _RS_SINGLE_HOW,
        "extra_tips": (_TIP_SINGLE_NAME,),
    }),
    "reduce_scatter_single": ("reduce_scatter", {
        "title": _t("reduce_scatter_single: reduce_scatter from one contiguous tensor",
                    "reduce_scatter_single: reduce_scatter a partir de um único tensor "
                    "contíguo"),
        "what": _t(
            """reduce_scatter whose input is one tensor n times the size of the output
            (concatenated or stacked along dimension 0) instead of a list; rank r ends with
            the reduction of slice r. In torch 2.13 it replaces reduce_scatter_tensor.""",
            """Um reduce_scatter cuja entrada é um único tensor n vezes maior que a saída
            (concatenado ou empilhado na dimensão 0) em vez de uma lista; o rank r termina
            com a redução da fatia r. No torch 2.13 ele substitui o
            reduce_scatter_tensor.""",
        ),
        "how": _RS_SINGLE_HOW,
    }),
    "all_to_all_single": ("all_to_all", {
        "title": _t("all_to_all_single: all_to_all on one tensor, optionally uneven",
                    "all_to_all_single: all_to_all num único tensor, com blocos desiguais "
                    "se quiser"),
        "what": _t(
            """The same exchange as all_to_all, but input and output are single tensors split
            along dimension 0; input_split_sizes and output_split_sizes allow blocks of
            different sizes, on gloo too.""",
            """A mesma troca do all_to_all, mas entrada e saída são tensores únicos divididos
            na dimensão 0; input_split_sizes e output_split_sizes permitem blocos de tamanhos
            diferentes, inclusive no gloo.""",
        ),
    }),
}

_FIELDS = ("title", "what", "how", "when", "tips")


def _resolve(op: str) -> dict[str, Any]:
    if op in _ENTRIES:
        return _ENTRIES[op]
    family, overrides = _VARIANTS[op]
    entry = dict(_ENTRIES[family])
    for name, value in overrides.items():
        if name == "how":
            entry["how"] = {**entry["how"], **value}
        elif name != "extra_tips":
            entry[name] = value
    entry["tips"] = tuple(overrides.get("extra_tips", ())) + tuple(entry["tips"])
    return entry


def _build(op: str, lang: str) -> Explanation:
    entry = _resolve(op)
    return Explanation(
        op=op,
        title=entry["title"][lang],
        what=entry["what"][lang],
        how={backend: text[lang] for backend, text in entry["how"].items()},
        when=entry["when"][lang],
        tips=tuple(tip[lang] for tip in entry["tips"]),
        nccl_tips=frozenset(tip[lang] for tip in entry["tips"] if tip in _NCCL_TIPS),
    )


EXPLAINED: tuple[str, ...] = tuple(_ENTRIES) + tuple(_VARIANTS)
_CACHE: dict[tuple[str, str], Explanation] = {
    (op, lang): _build(op, lang) for op in EXPLAINED for lang in LANGS
}


def _check_lang(lang: str) -> None:
    if lang not in LANGS:
        raise ValueError(f"unknown language {lang!r}; expected one of {', '.join(LANGS)}")


def explain(op: str, lang: str = "en") -> Explanation:
    """The explanation of ``op`` (a protocol op name) in ``lang`` ("en" or "pt")."""
    _check_lang(lang)
    try:
        found = _CACHE[(op, lang)]
    except KeyError:
        raise KeyError(f"no explanation for op {op!r}; known ops: "
                       f"{', '.join(sorted(EXPLAINED))}") from None
    return replace(found, how=dict(found.how))  # a fresh dict: the shared one stays intact


def default_lang(environ: Mapping[str, str] | None = None) -> str:
    """"pt" when the first set of LC_ALL, LC_MESSAGES, LANG starts with "pt", else "en"."""
    env = os.environ if environ is None else environ
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(name)
        if value:  # POSIX: an empty variable counts as unset
            return "pt" if value.lower().startswith("pt") else "en"
    return "en"


# --- Short strings of the teaching screen -------------------------------------------------

_UI_PAIRS: dict[str, tuple[str, str]] = {
    "paused": ("Paused", "Pausado"),
    "playing": ("Playing", "Reproduzindo"),
    "replay held": ("replay held (p)", "replay segurado (p)"),
    "demo ended": ("The demo has ended", "A demo terminou"),
    "waiting for replay": ("the ranks wait for the replay", "os ranks esperam o replay"),
    "pause": ("Pause", "Pausar"),
    "play": ("Play", "Reproduzir"),
    "step": ("Step", "Passo"),
    "next step": ("Next iteration", "Próxima iteração"),
    "previous step": ("Previous step", "Passo anterior"),
    "speed": ("Speed", "Velocidade"),
    "zoom timeline": ("Zoom the timeline in / out (it then holds the latest iteration)",
                      "Zoom da linha do tempo: aproximar / afastar (mostra a última iteração)"),
    "zoom in": ("Zoom the timeline in", "Aproximar a linha do tempo"),
    "zoom out": ("Zoom the timeline out", "Afastar a linha do tempo"),
    "zoom": ("zoom: {window} · z/Z", "zoom: {window} · z/Z"),
    "zoom auto": ("auto", "automático"),
    "latest": ("latest", "último"),
    "faster": ("Faster", "Mais rápido"),
    "slower": ("Slower", "Mais devagar"),
    "waiting for peers": ("Waiting for peers", "Aguardando os outros ranks"),
    "transferring": ("Transferring", "Transferindo"),
    "idle": ("Idle", "Ocioso"),
    "done": ("Done", "Concluído"),
    "failed": ("Failed", "Falhou"),
    "in flight": ("In flight", "Em andamento"),
    "schematic": ("Schematic", "Esquemático"),
    "schematic note": ("Schematic of the backend's algorithm; timings are measured",
                       "Esquema do algoritmo do backend; os tempos são medidos"),
    "measured": ("Measured", "Medido"),
    "predicted": ("Predicted", "Previsto"),
    "help": ("Help", "Ajuda"),
    "quit": ("Quit", "Sair"),
    "restart": ("Restart", "Reiniciar"),
    "language": ("Language", "Idioma"),
    "rank": ("Rank", "Rank"),
    "ranks": ("Ranks", "Ranks"),
    "root": ("Root", "Raiz (root)"),
    "source rank": ("Source rank", "Rank de origem"),
    "destination rank": ("Destination rank", "Rank de destino"),
    "backend": ("Backend", "Backend"),
    "timeline": ("Timeline", "Linha do tempo"),
    "buffers": ("Buffers", "Buffers"),
    "chunk": ("Chunk", "Pedaço"),
    "explanation": ("Explanation", "Explicação"),
    "what": ("What it does", "O que faz"),
    "how": ("How the data moves", "Como os dados se movem"),
    "when": ("When to use it", "Quando usar"),
    "tips": ("Tips", "Dicas"),
    "source": ("Source", "Código-fonte"),
    "statistics": ("Statistics", "Estatísticas"),
    "lag": ("Lag", "Atraso"),
    "late rank": ("Late rank", "Rank atrasado"),
    "bandwidth": ("Bandwidth", "Largura de banda"),
    "bytes": ("Bytes", "Bytes"),
    "elapsed": ("Elapsed", "Decorrido"),
    "operation": ("Operation", "Operação"),
    "inside": ("Inside the operation being replayed", "Por dentro da operação no replay"),
    "command palette": ("Command palette", "Paleta de comandos"),
    "next view": ("Next view (narrow terminal)", "Próxima visão (terminal estreito)"),
    "view numbers": ("Ranks, log and numbers", "Ranks, registro e números"),
    "view replay": ("Replay and timeline", "Replay e linha do tempo"),
    "view inside": ("Inside the operation", "Por dentro da operação"),
    "view explain": ("Explanation and source", "Explicação e código"),
    "view output": ("Job output", "Saída do job"),
    "replay": ("Replay of each operation, at human speed (schematic inner steps)",
               "Replay de cada operação, em velocidade humana (passos internos esquemáticos)"),
    "replay short": ("Replay at human speed (schematic inner steps)",
                     "Replay em velocidade humana (passos esquemáticos)"),
    "hold replay": ("Hold the replay (the job keeps running)",
                    "Segurar o replay (o job continua rodando)"),
    "source not here": ("source not readable on this machine",
                        "código-fonte não legível nesta máquina"),
    "cost": ("Cost", "Custo"),
    "recorded findings": ("findings of the live diagnosis ({}):",
                          "problemas achados pelo diagnóstico ao vivo ({}):"),
    "findings": ("Live diagnosis", "Diagnóstico ao vivo"),
    "in group": (" in group {}", " no grupo {}"),
    "late arrivals": ("late arrivals (the others waited): ",
                      "atrasos (os outros esperaram): "),
    "late once": ("rank {rank}: 1×, {waited} ({op} #{seq})",
                  "rank {rank}: 1×, {waited} ({op} #{seq})"),
    "late many": ("rank {rank}: {n}×, {waited} in all, longest {longest} ({op} #{seq})",
                  "rank {rank}: {n}×, {waited} ao todo, o maior {longest} ({op} #{seq})"),
    "no findings short": ("diagnosis: no straggler, hang, lost rank or mismatch",
                          "diagnóstico: nenhum rank atrasado, travado, perdido ou divergente"),
    "findings now": ("diagnosis: {n} finding, in the panel above|diagnosis: {n} findings, "
                     "in the panel above",
                     "diagnóstico: {n} problema, no painel acima|diagnóstico: {n} problemas, "
                     "no painel acima"),
    "findings unresolved": ("diagnosis: {n} finding ended with its job, unresolved (above)|"
                            "diagnosis: {n} findings ended with their job, unresolved (above)",
                            "diagnóstico: {n} problema terminou com o job, sem solução (acima)|"
                            "diagnóstico: {n} problemas terminaram com o job, sem solução "
                            "(acima)"),
    "check": ("Check", "Verifique"),
    "job output": ("Job output", "Saída do job"),
    "time": ("time", "tempo"),
    "start": ("start", "início"),
    "took": ("took {}", "levou {}"),
    "the first": (" (the first)", " (a primeira)"),
    "first transfer": ("The first transfer between these two ranks: its time includes setting "
                       "up their connection, made on first use (lazily).",
                       "A primeira transferência entre estes dois ranks: o tempo inclui criar "
                       "a conexão, feita só no primeiro uso (lazy)."),
    "first transfer took": ("The first transfer {src} → {dst} took {ms} ms: it also set up "
                            "the connection, made on first use (lazily); later ones reuse it.",
                            "A primeira transferência {src} → {dst} levou {ms} ms: ela "
                            "também criou a conexão, feita só no primeiro uso (lazy); as "
                            "seguintes a reaproveitam."),
    "each rank sends": ("each rank sends up to {bytes} in {n} step|each rank sends up to "
                        "{bytes} in {n} steps",
                        "cada rank envia até {bytes} em {n} passo|cada rank envia até {bytes} "
                        "em {n} passos"),
    "needs shapes": ("needs operations measured at two different sizes",
                     "requer operações medidas em dois tamanhos diferentes"),
    "fitted on": ("fitted on this run's {shapes} kinds of operation",
                  "ajustados aos {shapes} tipos de operação desta execução"),
    "digits chunks": ("digit = chunk held, · = not yet", "dígito = pedaço recebido, · = ainda não"),
    "digits senders": ("digit = the rank the block came from, · = not yet",
                       "dígito = rank que enviou o bloco, · = ainda não"),
    "digits summed block": ("digit = ranks summed into each part of the row's block, "
                            "· = not held",
                            "dígito = ranks somados em cada parte do bloco da linha, "
                            "· = ausente"),
    "digits summed": ("digit = ranks summed into the chunk, · = not held",
                      "dígito = ranks somados no pedaço, · = ausente"),
    "completed operations": ("Completed operations", "Operações concluídas"),
    "no operation yet": ("No operation completed yet", "Nenhuma operação concluída ainda"),
    # the explanation panel before a demo's first operation
    "before paused": ("Paused before iteration 1: n runs one iteration, space plays.",
                      "Pausado antes da iteração 1: n executa uma iteração, espaço continua."),
    "before playing": ("Starting: space pauses the ranks, then n runs one iteration at a time.",
                       "Começando: espaço pausa os ranks, e então n executa uma iteração por "
                       "vez."),
    "before paused playback": (
        "Paused at the start of the recording: n plays the next operation, space plays.",
        "Pausado no início da gravação: n reproduz a próxima operação, espaço continua."),
    "before playing playback": (
        "Playing the recording: space pauses, then n plays one operation at a time.",
        "Reproduzindo a gravação: espaço pausa, e então n reproduz uma operação por vez."),
    "next op": ("About to run: {op}", "Prestes a executar: {op}"),
    "demo starts": ("The {demo} demo: its first operation is explained here once it is done.",
                    "A demo {demo}: sua primeira operação é explicada aqui assim que terminar."),
    # the header (the launcher's reason for its backend)
    "nccl on gpus": ("nccl on {n} GPU(s)", "nccl em {n} GPU|nccl em {n} GPUs"),
    "gloo asked": ("gloo on CPU tensors (asked for)", "gloo com tensores na CPU (pedido)"),
    "gloo no gpus": ("gloo on CPU tensors: {gpus} GPU(s) here for {ranks} ranks",
                     "gloo com tensores na CPU: {gpus} GPU(s) aqui para {ranks} ranks"),
    "watching": ("watching {}", "observando {}"),
    "s/step": ("{} s/step", "{} s/passo"),
    # the time the replay needs to show them at its speed (not how old they are)
    "behind": ("{n} waiting, {s} s to go", "{n} na fila, faltam {s} s"),
    "skipped": ("{n} skipped", "{n} pulada|{n} puladas"),
    "replay held short": ("replay held", "replay segurado"),
    # the ranks panel
    "col rank": ("rank", "rank"),
    "col host": ("host", "host"),
    "col device": ("device", "disp."),
    "col state": ("state", "estado"),
    "col load": ("load (last 3 s)", "carga (últimos 3 s)"),
    "col bytes": ("read/written", "lido/escrito"),
    "state exited": ("exited", "encerrado"),
    "state killed": ("killed ({})", "morto ({})"),
    "state ended code": ("ended, exit {}", "terminou, saída {}"),
    "state silent": ("silent", "sem sinal"),
    "state silent for": ("silent {}s", "sem sinal há {} s"),
    "state in": ("in {}", "em {}"),
    "state done": ("done {}", "concluiu {}"),
    "state idle": ("idle", "ocioso"),
    "state not in": ("not in {}", "fora do {}"),
    "role sends": ("sends", "envia"),
    "role receives": ("receives", "recebe"),
    "role both": ("sends/receives", "envia e recebe"),
    "gpu links": ("GPU links: ", "enlaces entre GPUs: "),
    "pairs": ("×{n} pairs", "×{n} pares"),
    "no gpu on": ("no GPU on {who}: {note}{more}", "nenhuma GPU {who}: {note}{more}"),
    "on ranks": ("ranks {}", "nos ranks {}"),
    "on rank": ("rank {}", "no rank {}"),
    "other reasons": (" (and {n} other reason)| (and {n} other reasons)",
                      " (e mais {n} motivo)| (e mais {n} motivos)"),
    # the timeline
    "legend waiting": ("waiting for peers", "aguardando os outros"),
    "legend transferring": ("transferring", "transferindo"),
    "legend waiting short": ("waiting", "aguardando"),
    "legend dropped": ("history dropped", "histórico perdido"),
    "legend phases": ("phases", "fases"),
    "now": ("now", "agora"),
    "timeline end": ("end", "fim"),
    # the replay
    "waiting first": ("waiting for the first operation…", "aguardando a primeira operação…"),
    "real transfer": ("a real transfer, reported by both ranks",
                      "uma transferência real, relatada pelos dois ranks"),
    "step of": ("step {label} ({k} of {n})", "passo {label} ({k} de {n})"),
    "schematic label": ("schematic: ", "esquemático: "),
    "algorithm": ("{backend} {algorithm}", "{algorithm} do {backend}"),
    "backend unknown": ("its backend is not known yet, steps not drawn",
                        "backend ainda desconhecido, passos não desenhados"),
    "nothing moves": ("nothing moves", "nada se move"),
    "at once": ("{n} {op}s at once{times}: {pairs}, {size}",
                "{n} {op} ao mesmo tempo{times}: {pairs}, {size}"),
    "round": ("{n} {op}s in one round (each pair's #{seq}){times}: {pairs}, {size}",
              "{n} {op} numa rodada (o nº {seq} de cada par){times}: {pairs}, {size}"),
    "round numbered": ("{n} {op}s in one round (each pair's next, #{seq}-#{last}){times}: "
                       "{pairs}, {size}",
                       "{n} {op} numa rodada (o próximo de cada par, nº {seq}-{last}){times}: "
                       "{pairs}, {size}"),
    "and more": (" and {n} more", " e mais {n}"),
    "ring demo title": ("ring_allreduce (this demo): all_reduce written by hand",
                        "ring_allreduce (esta demo): all_reduce escrito à mão"),
    "ring demo": ("The tensor is cut into n chunks (n: the ranks). In each round every rank "
                  "sends one chunk to its right neighbour with isend and receives one from "
                  "its left with irecv. Rounds 1 to n-1 (reduce-scatter): the chunk received "
                  "is added into the rank's own copy of it, so that after them each rank "
                  "holds one chunk summed over all ranks. Rounds n to 2(n-1) (all-gather): "
                  "those finished chunks go round the ring and are copied. Each rank sends "
                  "2(n-1)·S/n bytes in all, as the ring all_reduce of gloo and NCCL does. "
                  "Below: the isend each round is made of.",
                  "O tensor é dividido em n pedaços (n: os ranks). A cada rodada, cada rank "
                  "manda um pedaço para o vizinho da direita com isend e recebe outro do "
                  "vizinho da esquerda com irecv. Nas rodadas 1 a n-1 (reduce-scatter), o "
                  "pedaço recebido é somado à cópia que o rank tem dele: ao fim delas, cada "
                  "rank tem um pedaço já somado sobre todos os ranks. Nas rodadas n a 2(n-1) "
                  "(all-gather), esses pedaços prontos dão a volta no anel e são copiados. "
                  "No total, cada rank envia 2(n-1)·S/n bytes, como no all_reduce em anel "
                  "do gloo e da NCCL. Abaixo: o isend de que cada rodada é feita."),
    "ring demo reduce": ("the demo's ring, round {k} of {total}: reduce-scatter {j} of {m}, "
                         "each rank adds the chunk it receives into its own copy of it",
                         "o anel da demo, rodada {k} de {total}: reduce-scatter {j} de {m}, "
                         "cada rank soma o pedaço que recebe à sua cópia dele"),
    "ring demo gather": ("the demo's ring, round {k} of {total}: all-gather {j} of {m}, "
                         "each rank copies the finished chunk it receives",
                         "o anel da demo, rodada {k} de {total}: all-gather {j} de {m}, "
                         "cada rank copia o pedaço pronto que recebe"),
    "inside round": ("{n} {op}s drawn as one round, each measured:",
                     "{n} {op} desenhados como uma rodada, cada um medido:"),
    "each": ("{size} each", "{size} cada"),
    "sizes from to": ("{low} to {high}", "de {low} a {high}"),
    "adds into": (" adds into (reduce)  ", " soma ao que já tem (reduce)  "),
    "copies": (" copies", " copia"),
    "adds short": (" reduce ", " soma "),
    "copies short": (" copy", " cópia"),
    "transfer": (" transfer (what the receiver does with it is not known)",
                 " transferência (o que o receptor faz com ela não se sabe)"),
    "transfer short": (" transfer", " transferência"),
    "do not fit": ("ranks {first}..{last} do not fit · ", "ranks {first}..{last} não cabem · "),
    "heatmap cell": ("{n} ranks a cell · ", "{n} ranks por célula · "),
    "heatmap": ("bytes sent row → column over the operation (schematic), this step coloured",
                "bytes enviados linha → coluna na operação (esquemático), este passo em cor"),
    # the operations log and the phases panel
    "log skew": ("skew", "defasagem"),
    "in parent": ("(in {})", "(em {})"),
    "by ddp": ("(by DDP)", "(pelo DDP)"),
    # the headless viewer's lines and summary (commviz/headless.py, text.py)
    "banner demo": ("commviz demo {op}: {n} ranks, {why}; viewer at {addr}",
                    "commviz demo {op}: {n} ranks, {why}; visualizador em {addr}"),
    # what a demo makes of --size, when not exactly the bytes asked (launcher.size_note)
    "size using": ("{bytes} B used ({detail})", "{bytes} B usados ({detail})"),
    "size in": (" in {demos}", " em {demos}"),
    "size elements": ("{n} float32", "{n} float32"),
    "size blocks": ("{n} blocks of {block} float32", "{n} blocos de {block} float32"),
    "size unused": ("--size {size}: not used, {demo} moves no tensor of that size",
                    "--size {size}: não usado, a demo {demo} não move tensor desse tamanho"),
    "banner watch": ("commviz watch: listening on {addr} (ranks: COMMVIZ_ADDR={addr}{keys}); "
                     "Ctrl-C to stop",
                     "commviz watch: escutando em {addr} (ranks: COMMVIZ_ADDR={addr}{keys}); "
                     "Ctrl-C para parar"),
    "banner run": ("viewer at {addr}; running {cmd} (Ctrl-C stops it)",
                   "visualizador em {addr}; rodando {cmd} (Ctrl-C para o job)"),
    "rank joined": ("rank {rank}/{world} joined: {host} pid {pid} {backend} {device}",
                    "rank {rank}/{world} entrou: {host} pid {pid} {backend} {device}"),
    "job rank joined": ("job {job}: rank {rank}/{world} joined: {host} pid {pid} {backend} "
                        "{device}",
                        "job {job}: rank {rank}/{world} entrou: {host} pid {pid} {backend} "
                        "{device}"),
    "head end": ("end (s)", "fim (s)"),
    "head size": ("size", "tamanho"),
    "head times": ("time from the last arrival, skew of the arrivals",
                   "tempo desde a última chegada, defasagem das chegadas"),
    "stats size": ("size (B)", "tamanho (B)"),
    "stats skew": ("skew (us)", "defasagem (us)"),
    "stats none": ("(no completed collective or transfer)",
                   "(nenhuma coletiva ou transferência concluída)"),
    "counts": ("{records}, {instances}, {transfers}", "{records}, {instances}, {transfers}"),
    "collective instances": ("{n} collective instance|{n} collective instances",
                             "{n} instância de coletiva|{n} instâncias de coletivas"),
    "counts failed": ("; {n} failed, not counted",
                      "; {n} com falha, não contada|; {n} com falha, não contadas"),
    "counts unmatched": ("; {n} left incomplete (records missing from some of its ranks)|; "
                         "{n} left incomplete (records missing from some of their ranks)",
                         "; {n} ficou incompleta (faltam registros de alguns dos seus ranks)|"
                         "; {n} ficaram incompletas (faltam registros de alguns dos seus "
                         "ranks)"),
    "counts viewer": ("; {rejected} malformed messages rejected; {dropped} records dropped by "
                      "ranks",
                      "; {rejected} mensagens malformadas rejeitadas; {dropped} registros "
                      "descartados pelos ranks"),
    "findings at end": ("when the job ended, {n} finding still held:|when the job ended, "
                        "{n} findings still held:",
                        "no fim do job, {n} problema ainda presente:|no fim do job, {n} "
                        "problemas ainda presentes:"),
    "no goodbye": ("{ranks} ended without saying goodbye (crashed, killed, or stopped)",
                   "{ranks} terminou sem se despedir (caiu, foi morto ou parado)|{ranks} "
                   "terminaram sem se despedir (caíram, foram mortos ou parados)"),
    "job running": ("the job is still running", "o job ainda está rodando"),
    "job stopped": ("the job was stopped ({reason}); exit code {code}",
                    "o job foi parado ({reason}); código de saída {code}"),
    # its {reason}: what made commviz stop it
    "stop q": ("q in commviz", "q no commviz"),
    "stop ctrl+c": ("Ctrl-C in commviz", "Ctrl-C no commviz"),
    "stop signal": ("{signal} to commviz", "{signal} enviado ao commviz"),
    "job killed": ("the job was killed by {signal} (exit code {code})",
                   "o job foi morto por {signal} (código de saída {code})"),
    "job exited": ("the job exited with code {code}", "o job terminou com código {code}"),
    "n ranks": ("{n} ranks", "{n} ranks"),
    "more operations": ("… {n} more operation (statistics count every one)|… {n} more "
                        "operations (statistics count every one)",
                        "… mais {n} operação (as estatísticas contam todas)|… mais {n} "
                        "operações (as estatísticas contam todas)"),
    "backend not known": ("{op}: the ranks' backend is not known yet",
                          "{op}: o backend dos ranks ainda não é conhecido"),
    "transfers": ("{n} transfer|{n} transfers", "{n} transferência|{n} transferências"),
    "n more": ("+{n} more", "+{n} outras"),
    "transfers column": ("transfers", "transferências"),
    "lanes left out": ("… {}: not shown (a taller terminal shows them)",
                       "… {}: fora da tela (um terminal mais alto os mostra)"),
    "not shown": ("not shown (widen the terminal): {}", "fora da tela (alargue o terminal): {}"),
    "not shown larger": ("not shown (larger screen): {}", "ocultos (tela maior): {}"),
    "op from root": ("{op} from rank {root}", "{op} a partir do rank {root}"),
    "op to root": ("{op} to rank {root}", "{op} para o rank {root}"),
    "this call": ("This call", "Esta chamada"),
    "predicted vs": ("{predicted} µs vs {measured} µs", "{predicted} µs; medido {measured} µs"),
    "fit line": ("α {alpha} µs/step, β {beta}, ", "α {alpha} µs/passo, β {beta}, "),
    "fit no beta": ("α {alpha} µs/step; bandwidth not measurable, the sizes are too small "
                    "(latency-bound), ",
                    "α {alpha} µs/passo; banda não mensurável, os tamanhos são pequenos demais "
                    "(limitado pela latência), "),
    "fit no alpha": ("β {beta}; time per step not measurable, the sizes are too large "
                     "(bandwidth-bound), ",
                     "β {beta}; tempo por passo não mensurável, os tamanhos são grandes demais "
                     "(limitado pela banda), "),
    # panel titles
    "stats title": ("statistics (nccl-tests columns, GB/s)",
                    "estatísticas (colunas do nccl-tests, GB/s)"),
    "viewer": ("viewer", "visualizador"),
    "col size": ("size", "tamanho"),
    "col count": ("calls", "chamadas"),
    # the viewer panel
    "listening on": ("listening on {}", "escutando em {}"),
    "op records": ("{n} op record|{n} op records", "{n} registro de op|{n} registros de op"),
    "collectives": ("{n} collective|{n} collectives", "{n} coletiva|{n} coletivas"),
    "failed ops": ("{n} failed operation|{n} failed operations",
                   "{n} operação com falha|{n} operações com falha"),
    "incomplete ops": ("{n} left incomplete", "{n} ficou incompleta|{n} ficaram incompletas"),
    "rejected": ("{n} malformed message rejected|{n} malformed messages rejected",
                 "{n} mensagem malformada rejeitada|{n} mensagens malformadas rejeitadas"),
    "dropped": ("{n} record dropped by ranks|{n} records dropped by ranks",
                "{n} registro descartado pelos ranks|{n} registros descartados pelos ranks"),
    "waiting ranks": ("waiting for ranks to connect…", "aguardando os ranks se conectarem…"),
    "findings more": ("more below: tab, then ↑↓", "mais abaixo: tab, depois ↑↓"),
    "findings more here": ("more below: ↑↓", "mais abaixo: ↑↓"),
    "no rank connected": ("no rank ever connected", "nenhum rank chegou a se conectar"),
    "space": ("space", "espaço"),
    "rank failed": ("{who} failed (exit {code}): {line}", "{who} falhou (saída {code}): {line}"),
    "rank ended": ("{who}: {end}, says torchrun's summary",
                   "{who}: {end}, diz o resumo do torchrun"),
    # what the launcher says of a rank that wrote no error (recorded in English)
    "killed no error": ("killed by {}, no error written", "morto por {}, sem erro escrito"),
    "no error written": ("no error written in its log", "nenhum erro escrito no seu log"),
    # after the screen closes: where the logs of a failed run are, the job's last lines
    "rank logs kept": ("rank logs kept in {dir}", "logs dos ranks guardados em {dir}"),
    "job output kept": ("the job's output kept in {dir}", "saída do job guardada em {dir}"),
    "job tail": ("the job's last line of output:|the job's last {n} lines of output:",
                 "a última linha de saída do job:|as últimas {n} linhas de saída do job:"),
    "job tail before stop": (
        "the job's last line of output before the stop:|the job's last {n} lines of output "
        "before the stop:",
        "a última linha de saída do job antes de ser parado:|as últimas {n} linhas de saída "
        "do job antes de ser parado:"),
    "job tail left out": ("… {n} more line, written as it was being stopped, left out|… {n} "
                          "more lines, written as it was being stopped, left out",
                          "… mais {n} linha, escrita enquanto era parado, omitida|… mais {n} "
                          "linhas, escritas enquanto era parado, omitidas"),
    "rank finished": ("{who} finished", "{who} terminou"),
    "stopping others": ("stopping the other ranks", "parando os outros ranks"),
    "job ended": ("the job has ended · q quits", "o job terminou · q sai"),
    "restarted": ("restarted", "reiniciado"),
    # commviz play: a recording played back
    "playing file": ("playing back {}", "reproduzindo a gravação {}"),
    "playback at": ("{at} of {total} s", "{at} de {total} s"),
    "playback ended": ("End of the recording", "Fim da gravação"),
    "recording cut": ("the recording's line {line} is cut short (its viewer was stopped while "
                      "writing it): left out",
                      "a linha {line} da gravação está cortada (o visualizador parou enquanto a "
                      "escrevia): deixada de fora"),
    "recording unclosed": ("the recording has no closing line: its viewer did not close it "
                           "(killed?), and it ends with its last message",
                           "a gravação não tem a linha final: o visualizador não a fechou "
                           "(foi morto?), e ela termina com sua última mensagem"),
    "playback waits": ("the playback waits for the replay", "a gravação espera o replay"),
    "next operation": ("Next operation", "Próxima operação"),
    "play title": ("play {file}", "gravação {file}"),
    "play title host": ("play {file}, recorded on {host}", "gravação {file}, feita em {host}"),
    "the job": ("the job", "o job"),
    "rank n": ("rank {}", "rank {}"),
    # the footer
    "key quit": ("Quit", "Sair"),
    "key view": ("View", "Visão"),
    "key pause": ("Pause/resume", "Pausar/continuar"),
    "key step": ("Next iteration", "Próxima iteração"),
    "key faster": ("Faster", "Mais rápido"),
    "key slower": ("Slower", "Mais devagar"),
    "key replay_pause": ("Hold replay", "Segurar replay"),
    "key step op": ("Next operation", "Próxima operação"),
    "key step op short": ("Next", "Próxima"),
    "key play_faster": ("Faster playback", "Gravação mais rápida"),
    "key next_finding": ("Next finding", "Próximo problema"),
    "key play_slower": ("Slower playback", "Gravação mais lenta"),
    "key pause short": ("Pause", "Pausa"),
    "key step short": ("Next", "Próxima"),
    "key faster short": ("Speed", "Ritmo"),
    "key replay_pause short": ("Hold", "Segurar"),
    "key": ("key", "tecla"),
    "key zoom_in": ("Zoom", "Aproximar"),
    "key zoom_out": ("Zoom out", "Afastar"),
    "key restart": ("Restart", "Reiniciar"),
    "key help": ("Help", "Ajuda"),
    "key palette": ("palette", "paleta"),
    "key lang": ("Language", "Idioma"),
    "key read": ("The explanation, full screen", "A explicação em tela cheia"),
    "close": ("esc: close", "esc: fechar"),
    "reading keys": ("↑↓ PgUp/PgDn · esc: close", "↑↓ PgUp/PgDn · esc: fechar"),
    "explain subtitle": ("e: full screen", "e: tela cheia"),
    # the help screen: what more there is to say of a key than the footer's words
    "help faster": ("the replay's speed", "a velocidade do replay"),
    "help replay_pause": ("the job keeps running", "o job continua rodando"),
    "help replay_pause playback": ("the recording plays on", "a gravação continua"),
    "help next_finding": ("2 s before the next finding of the live diagnosis, then the "
                          "finding itself",
                          "2 s antes do próximo problema achado pelo diagnóstico ao vivo, "
                          "depois o próprio problema"),
    "no later finding": ("no later finding in the recording",
                         "nenhum problema adiante na gravação"),
    "help play_faster": ("the recording's clock: ×1/16 to ×64",
                         "o relógio da gravação: ×1/16 a ×64"),
    "help zoom_in": ("the timeline; it then holds the latest activity in view",
                     "a linha do tempo, que então mantém à vista a atividade mais recente"),
    "help lang": ("English ↔ Português", "English ↔ Português"),
    "help view": ("narrow terminal: the next panels", "terminal estreito: os próximos painéis"),
    "help palette": ("every command, by name", "todos os comandos, por nome"),
    "help scroll": ("Scroll a panel back (the log, the job's output, the findings); Home, End",
                    "Rolar um painel para trás (o registro, a saída do job, os problemas); "
                    "Home, End"),
    "nccl algorithm": ("algorithm: {} (from NCCL's log)", "algoritmo: {} (do log do NCCL)"),
    "palette search": ("Search for commands…", "Buscar comandos…"),
    "language help": ("every panel in Brazilian Portuguese", "todos os painéis em inglês"),
    # several nodes: a line heads each node's ranks in the ranks panel
    "node": ("node {host}: {ranks}; {when}", "nó {host}: {ranks}; {when}"),
    "viewer's clock": ("the viewer's host and clock", "o host e o relógio do visualizador"),
    "clock unknown": ("clock offset unknown (no round trip on the clock channel yet)",
                      "diferença de relógio desconhecida (ainda sem ida e volta no canal de "
                      "relógio)"),
    "clock offset": ("clock {offset} ms ± {error} ms from the viewer's (corrected)",
                     "relógio {offset} ms ± {error} ms em relação ao do visualizador "
                     "(corrigido)"),
    "gloo fallback": ("Fewer GPUs than ranks: running gloo on CPU tensors",
                      "Menos GPUs que ranks: usando gloo com tensores na CPU"),
}

# Why a rank has no GPU, as the rank says it (rank/telemetry.py, rank/gpu_topology.py): the
# Portuguese of each beginning; a reason not listed is shown as the rank wrote it
GPU_NOTES_PT: tuple[tuple[str, str], ...] = (
    ("CPU tensors", "tensores na CPU"),
    ("NVML has no handle for this rank's GPU", "o NVML não tem handle para a GPU deste rank"),
    ("nvidia-ml-py (pynvml) is not installed", "nvidia-ml-py (pynvml) não está instalado"),
    ("NVML unavailable", "NVML indisponível"),
    ("NVML does not know", "o NVML não conhece"),
    ("NVML cannot list the GPUs", "o NVML não consegue listar as GPUs"),
    ("NVML sees none", "o NVML não vê nenhuma"),
)

# NCCL's algorithm as its log said it (nccl_log.NcclLog.algorithm_text), by the English text
NCCL_TEXTS_PT: dict[str, str] = {
    "algorithm unknown (run with NCCL_DEBUG=INFO to see NCCL's choice)":
        "algoritmo desconhecido (rode com NCCL_DEBUG=INFO para ver a escolha do NCCL)",
    "algorithm unknown (NCCL printed no choice for it: add NCCL_DEBUG_SUBSYS=INIT,COLL,TUNING)":
        "algoritmo desconhecido (o NCCL não imprimiu a escolha: acrescente "
        "NCCL_DEBUG_SUBSYS=INIT,COLL,TUNING)",
    "algorithm unknown (NCCL prints no choice for this op)":
        "algoritmo desconhecido (o NCCL não imprime escolha para esta op)",
}

# Textual's own commands in the palette, by their English help: (title, help) in Portuguese
TEXTUAL_COMMANDS_PT: dict[str, tuple[str, str]] = {
    "Change the current theme": ("Tema", "Trocar o tema atual"),
    "Quit the application as soon as possible": ("Sair", "Sair do aplicativo o quanto antes"),
    "Hide the keys and widget help panel": ("Teclas", "Esconder o painel de teclas e ajuda"),
    "Show help for the focused widget and a summary of available keys":
        ("Teclas", "Mostrar a ajuda do painel em foco e um resumo das teclas"),
    "Minimize the widget and restore to normal size":
        ("Minimizar", "Minimizar o painel e voltar ao tamanho normal"),
    "Maximize the focused widget": ("Maximizar", "Maximizar o painel em foco"),
    "Save an SVG 'screenshot' of the current screen":
        ("Captura de tela", "Salvar uma 'captura' SVG da tela atual"),
}

UI: dict[str, dict[str, str]] = {
    lang: {key: pair[i] for key, pair in _UI_PAIRS.items()} for i, lang in enumerate(LANGS)
}
"""UI[lang][key]: the short strings of the teaching screen, one table per language."""


def ui(key: str, lang: str = "en") -> str:
    """The UI string ``key`` in ``lang``; KeyError for an unknown key."""
    _check_lang(lang)
    try:
        return UI[lang][key]
    except KeyError:
        raise KeyError(f"no UI string {key!r}") from None


def in_language(line: str, lang: str) -> str:
    """A line commviz wrote in English from one of its UI strings ("killed by SIGKILL, no
    error written"), in ``lang``; any other line (a program's own error) as it is."""
    if lang == "en":
        return line
    for key in ("killed no error", "no error written"):
        en = UI["en"][key]
        pattern = re.escape(en).replace(re.escape("{}"), r"(\S+)")
        match = re.fullmatch(pattern, line)
        if match:
            return UI[lang][key].format(*match.groups())
    return line


def ui_n(key: str, n: int, lang: str = "en", **fields: Any) -> str:
    """The UI string ``key`` for a count ``n``, singular or plural (a string with both
    holds them as ``one|many``), its fields filled (``{n}`` and ``fields``)."""
    one, _, many = ui(key, lang).partition("|")
    return (one if n == 1 or not many else many).format(n=n, **fields)


def gpu_note(note: str, lang: str = "en") -> str:
    """A rank's reason for having no GPU, in ``lang`` where its beginning is known."""
    if lang == "pt":
        for en, pt in GPU_NOTES_PT:
            if note.startswith(en):
                return pt + note[len(en):]
    return note


def number(text: str, lang: str = "en") -> str:
    """A number the screen wrote, as ``lang`` writes it: a decimal comma in Portuguese
    (0,53 s). Only for text that holds numbers and units, never an address."""
    return text.replace(".", ",") if lang == "pt" else text


__all__ = ["BACKENDS", "EXPLAINED", "LANGS", "UI", "Explanation", "default_lang", "explain",
           "gpu_note", "number", "ui", "ui_n"]
